"""What a run writes, and what it reads back from its output_dir to resume.

  * say: rank 0's log lines (LOG_PREFIX);
  * decide_resume: the checkpoint to continue from (incomplete ones set aside), agreed by all ranks;
  * ProgressLog: output_dir/progress.jsonl, one line per logged step;
  * finish: the collective end of a run: every rank's report (rank_report) gathered into
    output_dir/metrics.json, and the outcome for the batch script (train.stop.report_outcome);
  * param digests: a test hook (SLURMGEN_TEST_PARAM_DIGEST_DIR) so a test can compare ranks.

The file formats are those the README documents and slurmgen's submit path reads.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any, Mapping

from train import checkpoint
from train.cli import UsageError
from train.collectives import active_group, broadcast_object
from train.distenv import DistEnv
from train.stop import report_outcome

LOG_PREFIX = "slurmgen-train:"
DIGEST_DIR_ENV = "SLURMGEN_TEST_PARAM_DIGEST_DIR"


def say(denv: DistEnv, message: str) -> None:
    """One log line from rank 0 only."""
    if denv.is_main:
        print(f"{LOG_PREFIX} {message}", flush=True)


def decide_resume(output_dir: str, denv: DistEnv, fallback: str | None = None) -> tuple[int, str] | None:
    """Rank 0 sets aside incomplete checkpoints and picks the newest complete one; all agree.

    ``fallback`` (e.g. --resume_from_checkpoint) is used only while output_dir has no
    complete checkpoint of its own, so a requeued job continues from its latest progress
    rather than from the starting point it was given. Needs the process group when world > 1.
    """
    choice: Any = None
    if denv.is_main:
        Path(output_dir).mkdir(parents=True, exist_ok=True)
        for moved in checkpoint.set_aside_incomplete(output_dir):
            say(denv, f"incomplete checkpoint set aside: {moved}")
        found = checkpoint.latest_complete(output_dir)
        if found is not None:
            choice = (found[0], str(found[1]))
        elif fallback:
            choice = _fallback_checkpoint(fallback)
    choice = broadcast_object(choice)
    if isinstance(choice, str):  # rank 0 found the given checkpoint unusable
        raise UsageError(choice)
    if choice is None:
        say(denv, "fresh start")
    else:
        say(denv, f"resuming from {choice[1]} at step {choice[0]}")
    return choice


def _fallback_checkpoint(path: str) -> tuple[int, str] | str:
    state = Path(path) / "trainer_state.json"
    if not state.is_file():
        return f"checkpoint not found: {path} (no trainer_state.json)"
    return int(json.loads(state.read_text()).get("global_step", 0)), str(path)


class ProgressLog:
    """Rank 0 appends one JSON line per logged step to output_dir/progress.jsonl."""

    def __init__(self, output_dir: str, denv: DistEnv, max_steps: int, global_batch: int):
        self.path = Path(output_dir) / "progress.jsonl"
        self.enabled = denv.is_main
        self.max_steps = max_steps
        self.global_batch = global_batch
        self.first_loss: float | None = None
        self.last_loss: float | None = None
        self._last: tuple[int, float] | None = None

    def start(self, step: int) -> None:
        self._last = (step, time.time())

    def log(self, step: int, loss: float, **extra: Any) -> None:
        loss = float(loss)
        if self.first_loss is None:
            self.first_loss = loss
        self.last_loss = loss
        if not self.enabled:
            return
        now = time.time()
        line: dict[str, Any] = {"step": step, "max_steps": self.max_steps, "loss": loss}
        if self._last is not None and step > self._last[0] and now > self._last[1]:
            line["samples_per_second"] = (step - self._last[0]) * self.global_batch / (now - self._last[1])
        line.update(extra)
        line["time"] = now
        self._last = (step, now)
        with open(self.path, "a") as fh:
            fh.write(json.dumps(line) + "\n")


def held_parameters(model) -> tuple[int, bool]:
    """Bytes of parameters this rank holds, and whether they are shards (FSDP2's DTensors)."""
    held, sharded = 0, False
    for p in model.parameters():
        if hasattr(p, "to_local"):
            p, sharded = p.to_local(), True
        held += p.numel() * p.element_size()
    return held, sharded


def rank_report(denv: DistEnv, data_prep_seconds: float | None, model=None) -> dict[str, Any]:
    """What every rank contributes to metrics.json, gathered in one collective."""
    import resource

    held, sharded = held_parameters(model) if model is not None else (None, False)
    mine = {
        "param_bytes": held,
        "sharded": sharded,
        "host": socket.gethostname(),
        # ru_maxrss is in KiB on Linux.
        "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "gpu_mb": None,
        "prep": data_prep_seconds,
        "local_world_size": denv.local_world_size,
    }
    if "torch" in sys.modules:
        import torch

        if torch.cuda.is_available() and torch.cuda.is_initialized():
            mine["gpu_mb"] = torch.cuda.max_memory_allocated() / 2**20
    dist = active_group()
    if dist is None:
        everyone = [mine]
    else:
        everyone = [None] * dist.get_world_size()
        dist.all_gather_object(everyone, mine)
    preps = [r["prep"] for r in everyone if r["prep"] is not None]
    report = {
        "ranks_per_host": dict(sorted(Counter(r["host"] for r in everyone).items())),
        "local_world_sizes": [r["local_world_size"] for r in everyone],
        "peak_rss_mb_per_rank": [round(r["rss_mb"], 1) for r in everyone],
        # The job waits for its slowest rank.
        "data_prep_seconds": max(preps) if preps else None,
    }
    if model is not None:
        report["sharding"] = "fsdp" if any(r["sharded"] for r in everyone) else "replicated"
        report["param_bytes_per_rank"] = [r["param_bytes"] for r in everyone]
    if any(r["gpu_mb"] is not None for r in everyone):
        report["peak_gpu_mb_per_rank"] = [r["gpu_mb"] and round(r["gpu_mb"], 1) for r in everyone]
    return report


def finish(
    output_dir: str,
    denv: DistEnv,
    *,
    global_step: int,
    start_step: int,
    resumed_from_step: int | None,
    progress: ProgressLog,
    train_loss: float | None,
    elapsed: float,
    global_batch: int,
    tokens: int | None,
    stopped_early: bool,
    model=None,
    extra: Mapping[str, Any] | None = None,
    data_prep_seconds: float | None = None,
) -> dict[str, Any]:
    """Collective end of a run: gather hosts, write metrics.json on rank 0, return metrics."""
    steps = max(global_step - start_step, 0)
    rate = (lambda n: n / elapsed if elapsed > 0 and steps else None)
    metrics: dict[str, Any] = {
        "world_size": denv.world_size,
        "global_step": global_step,
        "train_loss": train_loss,
        "first_loss": progress.first_loss,
        "last_loss": progress.last_loss,
        "samples_per_second": rate(steps * global_batch),
        "tokens_per_second": rate(tokens) if tokens is not None else None,
        "train_runtime": elapsed,
        "resumed_from_step": resumed_from_step,
        "stopped_early": stopped_early,
        **rank_report(denv, data_prep_seconds, model),
    }
    if extra:
        metrics.update(extra)
    if model is not None:
        write_param_digest(model, denv)
    if stopped_early:
        say(denv, f"stop requested, saved checkpoint at step {global_step}")
    if denv.is_main:
        Path(output_dir).mkdir(parents=True, exist_ok=True)
        checkpoint.write_json_atomic(Path(output_dir) / "metrics.json", metrics)
        report_outcome(stopped_early, global_step)
    return metrics


def param_digest(model) -> str:
    """sha256 over every parameter's name and fp32 bytes, in a fixed order."""
    import torch

    h = hashlib.sha256()
    with torch.no_grad():
        for name, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
            if hasattr(p, "full_tensor"):  # an FSDP shard: every rank gathers the whole (collective)
                p = p.full_tensor()
            h.update(name.encode())
            h.update(p.detach().to("cpu", torch.float32).contiguous().numpy().tobytes())
    return h.hexdigest()


def write_param_digest(model, denv: DistEnv) -> None:
    """Test hook: each rank writes its final parameter digest so a test can compare ranks."""
    out = os.environ.get(DIGEST_DIR_ENV)
    if not out:
        return
    Path(out).mkdir(parents=True, exist_ok=True)
    (Path(out) / f"rank{denv.rank}.sha256").write_text(param_digest(model) + "\n")
