"""A run's context for `slurmgen report`: its attempts and interruptions, goodput, best loss, settings,
nodes and throughput over time, from its output directory and (when given) its job logs.

Attempts. Every requeued run appends to progress.jsonl again, from the step after its checkpoint.
A new attempt begins where the step goes back or repeats. One that resumed exactly where the last
stopped (a time limit or a preemption: the checkpoint is taken at the stop) goes on counting up;
the job log tells it: how many times the job started and at which step each run resumed. Such a
boundary is put at the longest pause in progress.jsonl that straddles a resume step, and only when
that pause is at least 3 times the run's median time between lines.

Goodput = training seconds / allocated seconds:
  * training seconds: from progress.jsonl's timestamps, the sum of the time between consecutive
    lines of the same attempt, for the lines whose steps were kept (steps a later attempt did again
    count as lost);
  * allocated seconds: the sum over the job's runs of the time each held its nodes, from the job
    runtime's record beside the job log (LOG_DIR/.slurmgen-JOBID/state.json, when --logs finds it);
    without it, wall seconds: from the first logged line of the run to its last.
So time lost to interruptions (stop, start-up, loading, steps done twice; queue waits only in wall
seconds) lowers it;
the first logging interval of each attempt is not counted (its start is not recorded), and a pause
inside an attempt (a checkpoint save, an evaluation) counts as training.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from slurmgen.observe.report_logs import Start

GAP_FACTOR = 3.0  # a seamless resume's pause is at least this many median intervals
STATE_SETTINGS = {"train_batch_size": "per_device_train_batch_size", "max_steps": "max_steps",
                  "num_train_epochs": "num_train_epochs", "logging_steps": "logging_steps",
                  "save_steps": "save_steps", "eval_steps": "eval_steps"}


@dataclass
class Interruption:
    step: int    # where the loss chart marks it: the step training resumed from, else the first step logged after
    cause: str   # "preemption", "time limit", "crash on node3", ..., "unknown"; "interrupted" without a job log


@dataclass
class Context:
    attempts: int = 0
    interruptions: list[Interruption] = field(default_factory=list)
    starts: list[Start] = field(default_factory=list)  # every run of its jobs, from the job logs
    logs: list[Path] = field(default_factory=list)
    first_time: Optional[float] = None
    last_time: Optional[float] = None
    training_seconds: Optional[float] = None
    best_loss: Optional[float] = None
    best_step: Optional[int] = None
    ranks_per_host: dict[str, int] = field(default_factory=dict)
    world_size: Optional[int] = None
    settings: dict[str, str] = field(default_factory=dict)
    tput_steps: list[int] = field(default_factory=list)
    tput: list[float] = field(default_factory=list)  # samples/s at each kept line

    @property
    def wall_seconds(self) -> Optional[float]:
        if self.first_time is None or self.last_time is None:
            return None
        return self.last_time - self.first_time

    @property
    def allocated_seconds(self) -> Optional[float]:
        """What the job's runs held their nodes for; None unless the runtime recorded every run."""
        seconds = [s.seconds for s in self.starts]
        return sum(seconds) if seconds and None not in seconds else None

    @property
    def goodput(self) -> Optional[float]:
        held = self.allocated_seconds or self.wall_seconds
        if not held or held <= 0 or self.training_seconds is None:
            return None
        return min(self.training_seconds / held, 1.0)

    @property
    def job_ids(self) -> list[str]:
        return list(dict.fromkeys(s.job for s in self.starts))

    @property
    def restarts(self) -> list[Start]:
        return self.starts[1:]


def _num(value: Any) -> Optional[float]:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def build(run_dir: Path, entries: list[dict], metrics: Optional[dict], swept: dict[str, str],
          steps: list[int], losses: list[float], starts: list[Start]) -> Context:
    """The context of one run: entries are its progress.jsonl lines (each with an integer step)."""
    ctx = Context(starts=starts, logs=list(dict.fromkeys(s.log for s in starts)))
    steps_all = [int(e["step"]) for e in entries]
    times = [_num(e.get("time")) for e in entries]
    bounds = _boundaries(steps_all, times, starts)
    ctx.attempts = len(bounds) + 1 if entries else 0
    ctx.interruptions = _interruptions(bounds, steps_all, starts)
    kept = _kept(steps_all)
    known = [t for t in times if t is not None]
    if known:
        ctx.first_time, ctx.last_time = min(known), max(known)
        starts_at = set(bounds)
        ctx.training_seconds = sum(max(times[i] - times[i - 1], 0.0) for i in range(1, len(entries))
                                   if i in kept and i not in starts_at
                                   and times[i] is not None and times[i - 1] is not None)
    finite = [(loss, step) for step, loss in zip(steps, losses) if math.isfinite(loss)]
    if finite:
        ctx.best_loss, ctx.best_step = min(finite, key=lambda ls: ls[0])
    for i in sorted(kept):
        sps = _num(entries[i].get("samples_per_second"))
        if sps is not None:
            ctx.tput_steps.append(steps_all[i])
            ctx.tput.append(sps)
    m = metrics or {}
    hosts = m.get("ranks_per_host")
    if isinstance(hosts, dict):
        ctx.ranks_per_host = {str(h): int(n) for h, n in hosts.items() if _num(n) is not None}
    size = _num(m.get("world_size"))
    ctx.world_size = int(size) if size is not None else (starts[-1].world_size if starts else None)
    ctx.settings = _settings(run_dir, entries, ctx.world_size, swept)
    return ctx


def _boundaries(steps: list[int], times: list[Optional[float]], starts: list[Start]) -> list[int]:
    """Indices of the lines that begin a new attempt, in order."""
    bounds = [i for i in range(1, len(steps)) if steps[i] <= steps[i - 1]]
    missing = len(starts) - 1 - len(bounds)
    gaps = [times[i] - times[i - 1] for i in range(1, len(steps))
            if times[i] is not None and times[i - 1] is not None and i not in bounds]
    if missing <= 0 or not gaps:
        return bounds
    floor = GAP_FACTOR * statistics.median(gaps)
    resumed = {s.resumed_step for s in starts[1:] if s.resumed_step is not None}
    candidates = []
    for i in range(1, len(steps)):
        if i in bounds or times[i] is None or times[i - 1] is None:
            continue
        gap = times[i] - times[i - 1]
        if gap >= floor and gap > 0 and any(steps[i - 1] <= r < steps[i] for r in resumed):
            candidates.append((gap, i))
    chosen = [i for _, i in sorted(candidates, reverse=True)[:missing]]
    return sorted(bounds + chosen)


def _interruptions(bounds: list[int], steps: list[int], starts: list[Start]) -> list[Interruption]:
    """A marker per boundary, labelled with the causes of the restarts it stands for (in order; a
    restart that logged no step goes with the next one that resumed from the same checkpoint)."""
    restarts = starts[1:]
    out, p = [], 0
    for b, i in enumerate(bounds):
        first = steps[i]
        mine = []
        if p < len(restarts):
            mine.append(restarts[p])
            p += 1
            while (p < len(restarts) and len(restarts) - p - 1 >= len(bounds) - b - 1
                   and restarts[p].resumed_step is not None
                   and restarts[p].resumed_step == mine[-1].resumed_step):
                mine.append(restarts[p])
                p += 1
        resumed = [r.resumed_step for r in mine if r.resumed_step is not None and r.resumed_step < first]
        causes = list(dict.fromkeys(r.cause or "unknown" for r in mine)) or ["interrupted"]
        out.append(Interruption(resumed[-1] if resumed else first, ", ".join(causes)))
    return out


def _kept(steps: list[int]) -> set[int]:
    """Indices of the lines whose steps no later attempt did again (as report._latest_attempt)."""
    kept: list[int] = []
    for i, step in enumerate(steps):
        while kept and steps[kept[-1]] >= step:
            kept.pop()
        kept.append(i)
    return set(kept)


def _settings(run_dir: Path, entries: list[dict], world_size: Optional[int],
              swept: dict[str, str]) -> dict[str, str]:
    """The training settings the output directory records: the newest complete checkpoint's
    trainer_state.json (Hugging Face trainers), progress.jsonl's max_steps, the world size and the
    swept values (sweep.json). The full command line is not written there."""
    found: dict[str, str] = {}
    state = _newest_trainer_state(run_dir)
    for key, name in STATE_SETTINGS.items():
        value = _num(state.get(key))
        if value is not None:
            found[name] = str(int(value)) if value.is_integer() else f"{value:g}"
    top = next((e.get("max_steps") for e in reversed(entries) if _num(e.get("max_steps")) is not None), None)
    if top is not None and "max_steps" not in found:
        found["max_steps"] = str(int(top))
    if world_size is not None:
        found["world_size"] = str(world_size)
    found.update(swept)
    return dict(sorted(found.items()))


def _newest_trainer_state(run_dir: Path) -> dict:
    try:
        checkpoints = [c for c in run_dir.iterdir() if c.name.startswith("checkpoint-")
                       and c.name[len("checkpoint-"):].isdigit() and (c / "slurmgen_complete").is_file()]
    except OSError:
        return {}
    for c in sorted(checkpoints, key=lambda c: int(c.name[len("checkpoint-"):]), reverse=True):
        try:
            data = json.loads((c / "trainer_state.json").read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict):
            return data
    return {}


def split_settings(contexts: list[Context]) -> tuple[list[str], dict[str, str]]:
    """The settings whose values differ between runs (or that some run lacks), and those every run
    has with the same value."""
    keys = list(dict.fromkeys(k for c in contexts for k in c.settings))
    differ, same = [], {}
    for k in keys:
        values = [c.settings.get(k) for c in contexts]
        if len(contexts) > 1 and (None in values or len(set(values)) > 1):
            differ.append(k)
        else:
            same[k] = values[0] or ""
    return differ, same
