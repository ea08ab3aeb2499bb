"""`slurmgen watch` for a sweep: a job array, or several het jobs, followed one line per run until
every run has ended."""

from __future__ import annotations

import json
import shutil
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, TextIO

from slurmgen.observe.watch import last_progress
from slurmgen.site.jobs import NO_VALUE, TERMINAL, job_records, overall_state


SWEEP_PREFIX = "slurmgen: sweep run "  # the batch script's line: slurmgen: sweep run 2: {...} -> DIR


@dataclass
class Run:
    """One run of a sweep as last seen: its Slurm job, and what its log's sweep line says."""
    key: tuple                      # ("array", ARRAY_JOB_ID, TASK) or ("job", JOB_ID)
    job: str                        # 1201_2 for an array task, else the (het) job id
    state: str
    task: Optional[int] = None      # the array task id
    restarts: str = "0"
    log: Optional[Path] = None      # the job's StdOut
    workdir: Optional[str] = None
    index: Optional[int] = None     # from the sweep line: the run, its values, its directory
    values: Optional[dict] = None
    run_dir: Optional[Path] = None
    order: int = 0                  # first seen; orders runs the sweep line has not named yet


def expand_array_tasks(spec: str) -> list[int]:
    """ArrayTaskId as scontrol writes it, `2`, `2-3%2`, `1,4-9:2`: the task ids."""
    tasks: list[int] = []
    for part in spec.split("%", 1)[0].strip("[]").split(","):
        span, _, step = part.partition(":")
        first, dash, last = span.partition("-")
        try:
            low, high, every = int(first), int(last) if dash else int(first), int(step) if step else 1
        except ValueError:
            continue
        tasks += range(low, high + 1, max(every, 1))
    return tasks


def parse_sweep_line(line: str) -> Optional[tuple[int, dict, str]]:
    """`slurmgen: sweep run 2: {"seed": "1"} -> DIR` -> (2, {"seed": "1"}, "DIR"); None for other lines."""
    if not line.startswith(SWEEP_PREFIX):
        return None
    index, sep, rest = line[len(SWEEP_PREFIX):].partition(": ")
    if not sep or not index.isdigit():
        return None
    try:
        values, end = json.JSONDecoder().raw_decode(rest)
    except ValueError:
        return None
    directory = rest[end:]
    if not isinstance(values, dict) or not directory.startswith(" -> ") or len(directory) == 4:
        return None
    return int(index), values, directory[4:]


def find_sweep_line(text: str) -> Optional[tuple[int, dict, str]]:
    for line in text.splitlines():
        found = parse_sweep_line(line)
        if found:
            return found
    return None


def resolve_run_dir(directory: str, workdir: Optional[str]) -> Path:
    """The sweep line's directory; a relative one is relative to the job's WorkDir."""
    path = Path(directory)
    if path.is_absolute() or workdir in NO_VALUE or workdir is None:
        return path
    return Path(workdir) / path


def _log_path(record: dict) -> Optional[Path]:
    stdout = record.get("StdOut", "")
    if stdout in NO_VALUE:
        return None
    return resolve_run_dir(stdout, record.get("WorkDir"))


def is_array(records: list[dict]) -> bool:
    return any(r.get("ArrayTaskId", "") not in NO_VALUE for r in records)


def runs_from_records(job_id: str, records: list[dict]) -> list[Run]:
    """The runs in one `scontrol show job -o JOB_ID`: one per array task (a record of grouped pending
    tasks, `ArrayTaskId=2-3%2`, is one run per task), else one per job (a het job's components are one)."""
    if not records:
        return [Run(("missing", str(job_id)), str(job_id), "UNKNOWN")]
    runs, jobs = [], {}
    for record in records:
        spec = record.get("ArrayTaskId", "")
        if spec not in NO_VALUE:
            array = record.get("ArrayJobId") or record.get("JobId") or str(job_id)
            tasks = expand_array_tasks(spec)
            for task in tasks:
                runs.append(Run(("array", array, task), f"{array}_{task}", record.get("JobState", "UNKNOWN"),
                                task=task, restarts=record.get("Restarts", "0"),
                                log=_log_path(record) if len(tasks) == 1 else None,
                                workdir=record.get("WorkDir")))
        else:
            jobs.setdefault(record.get("HetJobId") or record.get("JobId") or str(job_id), []).append(record)
    for job, group in jobs.items():
        lead = min(group, key=lambda r: int(r["HetJobOffset"]) if r.get("HetJobOffset", "").isdigit() else 0)
        runs.append(Run(("job", job), job, overall_state(group), restarts=lead.get("Restarts", "0"),
                        log=_log_path(lead), workdir=lead.get("WorkDir")))
    return runs


class Sweep:
    """The runs seen so far (pure: fed the records of each poll). A run no longer listed keeps its
    last state; an id scontrol has never known is one UNKNOWN run until it does."""

    def __init__(self):
        self.known: dict[tuple, Run] = {}
        self.listed: set[str] = set()  # ids scontrol has answered for
        self.seen = 0

    def update(self, job_id: str, records: list[dict]) -> None:
        job_id = str(job_id)
        if records:
            self.listed.add(job_id)
            self.known.pop(("missing", job_id), None)
        elif job_id in self.listed:
            return  # no answer this time: keep what we had
        for run in runs_from_records(job_id, records):
            old = self.known.get(run.key)
            if old is None:
                run.order, self.seen = self.seen, self.seen + 1
                self.known[run.key] = run
                continue
            old.job, old.state, old.restarts = run.job, run.state, run.restarts
            old.log = run.log or old.log
            if run.workdir not in NO_VALUE and run.workdir is not None:
                old.workdir = run.workdir

    def runs(self) -> list[Run]:
        """By run number (the sweep line's, else the array task id); runs with neither last."""
        def number(run):
            return run.index if run.index is not None else run.task
        return sorted(self.known.values(), key=lambda r: (number(r) is None, number(r) or 0, r.order))


def apply_sweep_line(run: Run, found: tuple[int, dict, str]) -> None:
    run.index, run.values = found[0], found[1]
    run.run_dir = resolve_run_dir(found[2], run.workdir)


def _value(value) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def run_line(run: Run, progress: Optional[dict] = None) -> str:
    """run 2 learning_rate=1e-2 seed=1  job 1201_2  RUNNING  step 5/30 loss 4.2100"""
    number = run.index if run.index is not None else run.task
    head = f"run {'?' if number is None else number}"
    if run.values:
        head += "".join(f" {key}={_value(value)}" for key, value in run.values.items())
    text = f"{head}  job {run.job}  {run.state}"
    if run.restarts not in ("", "0"):
        text += f" restart {run.restarts}"
    parts = []
    if progress:
        step, total = progress.get("step"), progress.get("max_steps")
        if isinstance(step, int) and isinstance(total, int) and total > 0:
            parts.append(f"step {step}/{total}")
        elif step is not None:
            parts.append(f"step {step}")
        loss = progress.get("loss")
        if isinstance(loss, (int, float)) and not isinstance(loss, bool):
            parts.append(f"loss {loss:.4f}")
    return text + ("  " + " ".join(parts) if parts else "")


def sweep_done(states: list[str]) -> bool:
    return bool(states) and all(state in TERMINAL for state in states)


def sweep_ok(states: list[str]) -> bool:
    return bool(states) and all(state == "COMPLETED" for state in states)


def sweep_summary(states: list[str], timed_out: bool = False) -> str:
    """sweep: 4 run(s): 3 COMPLETED, 1 FAILED  (COMPLETED first, then the other states by name)"""
    counts = Counter(states)
    text = f"sweep: {len(states)} run(s): " + ", ".join(
        f"{counts[state]} {state}" for state in sorted(counts, key=lambda s: (s != "COMPLETED", s)))
    return text + (" (WATCH_TIMEOUT)" if timed_out else "")


def follows_sweep(job_ids) -> bool:
    """Several ids, or one that is a job array: `slurmgen watch` follows them as a sweep."""
    return len(job_ids) > 1 or is_array(job_records(job_ids[0]))


class SweepLogs:
    """Reads each run's log, from where it left off, until its sweep line is found."""

    CHUNK = 1 << 20

    def __init__(self):
        self.offsets: dict[Path, int] = {}

    def find(self, path: Path) -> Optional[tuple[int, dict, str]]:
        offset = self.offsets.get(path, 0)
        try:
            with open(path, "rb") as fh:
                fh.seek(offset)
                chunk = fh.read(self.CHUNK)
        except OSError:
            return None
        end = chunk.rfind(b"\n") + 1
        if end == 0 and len(chunk) == self.CHUNK:
            end = len(chunk)  # a megabyte without a newline is no sweep line
        self.offsets[path] = offset + end
        return find_sweep_line(chunk[:end].decode(errors="replace"))


def watch_sweep(job_ids: list[str], interval: float = 1.0, timeout: Optional[float] = None,
                out: Optional[TextIO] = None) -> tuple[list[str], bool]:
    """One line per run until every run has ended: redrawn in place on a terminal, the whole block
    again whenever a line changed otherwise. Returns the runs' final states and whether it timed out."""
    out = sys.stdout if out is None else out
    deadline = None if timeout is None else time.monotonic() + timeout
    live = out.isatty()
    sweep = Sweep()
    logs = SweepLogs()
    previous: Optional[list[str]] = None
    drawn = 0
    while True:
        for job_id in job_ids:
            sweep.update(job_id, job_records(job_id))
        for run in sweep.runs():
            if run.values is None and run.log is not None:
                found = logs.find(run.log)
                if found:
                    apply_sweep_line(run, found)
        runs = sweep.runs()
        lines = [run_line(run, last_progress(run.run_dir)) for run in runs]
        if lines != previous:
            if live:
                width = max(20, shutil.get_terminal_size().columns - 1)  # a wrapped line breaks the redraw
                out.write((f"\x1b[{drawn}A" if drawn else "")
                          + "".join(f"\r\x1b[2K{line[:width]}\n" for line in lines))
                drawn = len(lines)
            else:
                out.write(("\n" if previous is not None else "") + "".join(line + "\n" for line in lines))
            out.flush()
            previous = lines
        states = [run.state for run in runs]
        if sweep_done(states):
            return states, False
        if deadline is not None and time.monotonic() > deadline:
            return states, True
        time.sleep(interval)
