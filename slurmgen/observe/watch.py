"""Follow a submitted job: Slurm state from scontrol, training progress from rank 0's progress.jsonl,
and what the job's own log says about hangs, failures and excluded nodes as it happens.

Used by `slurmgen watch`, the demo and the submit command. Reads files and runs scontrol; no torch.
A sweep (a job array, or several jobs: one het job per run) is followed one line per run (watch_sweep).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Optional, TextIO

from slurmgen.job.hangs import read_beats
from slurmgen.job.record import JobFiles
from slurmgen.job.slurm import read_log
from slurmgen.site.jobs import TERMINAL, job_records, overall_state
from slurmgen.site.jobs import NO_VALUE


PROGRESS_TAIL = 64 * 1024  # far more than one line


def last_progress(output_dir: Optional[Path]) -> Optional[dict]:
    """Newest complete line of progress.jsonl, or None before the first step."""
    if output_dir is None:
        return None
    path = Path(output_dir) / "progress.jsonl"
    # the end only: watch asks every second, and a long run's file has a line per step
    for line in reversed(read_log(str(path), tail=PROGRESS_TAIL).splitlines()):
        try:
            return json.loads(line)
        except ValueError:
            continue  # a line still being written
    return None


def beat_progress(records: list[dict]) -> Optional[dict]:
    """Rank 0's step from its heartbeat beside the job log: the progress of a script that writes
    no progress.jsonl (the rank hooks beat at every optimizer step)."""
    log = records[0].get("StdOut", "") if records else ""
    if log in NO_VALUE:
        return None
    beat = read_beats(JobFiles.of(Path(log).parent, records[0].get("JobId", "")).beats).get(0)
    return {"step": beat.step} if beat else None


def progress_line(state: str, progress: Optional[dict], restarts: str = "0", width: int = 24) -> str:
    text = f"[{state:<10}]"
    if restarts not in ("", "0"):
        text += f" restart {restarts}"
    if not progress:
        return text
    step, total = progress.get("step"), progress.get("max_steps")
    if isinstance(step, int) and isinstance(total, int) and total > 0:
        done = min(width, width * step // total)
        text += f" step {step}/{total} [{'#' * done}{'.' * (width - done)}]"
    elif step is not None:
        text += f" step {step}"
    if progress.get("loss") is not None:
        text += f" loss {progress['loss']:.4f}"
    if progress.get("samples_per_second"):
        text += f" {progress['samples_per_second']:.1f} samples/s"
    return text


# Lines of the job log a watcher shows as they come: hang summaries, retries, excluded nodes, slow
# nodes and stragglers.
EVENT_PREFIXES = ("slurmgen: hang", "slurmgen:   ", "slurmgen: failure", "slurmgen: the last run",
                  "slurmgen: no rank had begun", "slurmgen: slow link", "slurmgen: straggler")


class LogEvents:
    """New event lines of the job's log (its StdOut, and its StdErr where that is another file)."""

    def __init__(self):
        self.offsets: dict[Path, int] = {}

    def new(self, records: list[dict]) -> list[str]:
        if not self.offsets and records:
            for key in ("StdOut", "StdErr"):
                if records[0].get(key, "") not in ("", "(null)"):
                    self.offsets.setdefault(Path(records[0][key]), 0)
        found = []
        for path, offset in self.offsets.items():
            try:
                with open(path, "rb") as fh:
                    fh.seek(offset)
                    chunk = fh.read()
            except OSError:
                continue
            complete = chunk[:chunk.rfind(b"\n") + 1]
            self.offsets[path] = offset + len(complete)
            found += [line for line in complete.decode(errors="replace").splitlines()
                      if line.startswith(EVENT_PREFIXES)]
        return found


def watch(job_id: str, output_dir: Optional[Path] = None, interval: float = 1.0,
          timeout: Optional[float] = None, out: Optional[TextIO] = None) -> str:
    """Print state and progress until the job ends; return its final state."""
    out = sys.stdout if out is None else out  # looked up now: click's runner swaps sys.stdout
    deadline = None if timeout is None else time.monotonic() + timeout
    live = out.isatty()
    previous = None
    events = LogEvents()
    while True:
        records = job_records(job_id)
        for event in events.new(records):
            out.write(("\r" + event.ljust(100) + "\n") if live else event + "\n")
            previous = None  # a live progress line is drawn again below
        state = overall_state(records)
        restarts = records[0].get("Restarts", "0") if records else "0"
        progress = last_progress(output_dir) or beat_progress(records)
        line = progress_line(state, progress, restarts)
        if line != previous:
            out.write(("\r" + line.ljust(100)) if live else line + "\n")
            out.flush()
            previous = line
        if state in TERMINAL:
            if live:
                out.write("\n")
            return state
        if deadline is not None and time.monotonic() > deadline:
            if live:
                out.write("\n")
            return "WATCH_TIMEOUT"
        time.sleep(interval)


# ---- Sweeps: every run of a job array, or of several jobs (one het job per run), one line each ----


