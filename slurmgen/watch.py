"""Follow a submitted job: Slurm state from scontrol, training progress from rank 0's progress.jsonl,
and what the job's own log says about hangs, failures and excluded nodes as it happens.

Used by `slurmgen watch`, the demo and the submit command. Reads files and runs scontrol; no torch.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional, TextIO

TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
            "PREEMPTED", "BOOT_FAIL", "DEADLINE", "UNKNOWN"}
# When components disagree, the worst one names the job.
_SEVERITY = ["FAILED", "NODE_FAIL", "OUT_OF_MEMORY", "TIMEOUT", "CANCELLED", "BOOT_FAIL",
             "DEADLINE", "PREEMPTED", "RUNNING", "COMPLETING", "REQUEUED", "PENDING", "COMPLETED"]


def job_records(job_id: str) -> list[dict]:
    """One dict per component from `scontrol show job -o` (several lines for a het job)."""
    proc = subprocess.run(["scontrol", "show", "job", "-o", str(job_id)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        return []
    records = []
    for line in proc.stdout.splitlines():
        fields = {}
        for token in line.split():
            key, sep, value = token.partition("=")
            if sep:
                fields[key] = value
        if fields:
            records.append(fields)
    return records


def overall_state(records: list[dict]) -> str:
    states = [r.get("JobState", "UNKNOWN") for r in records] or ["UNKNOWN"]
    ranked = sorted(states, key=lambda s: _SEVERITY.index(s) if s in _SEVERITY else 0)
    return ranked[0]


def last_progress(output_dir: Optional[Path]) -> Optional[dict]:
    """Newest complete line of progress.jsonl, or None before the first step."""
    if output_dir is None:
        return None
    path = Path(output_dir) / "progress.jsonl"
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        try:
            return json.loads(line)
        except ValueError:
            continue  # a line still being written
    return None


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


# Lines of the job log a watcher shows as they come: hang summaries, retries, excluded nodes.
EVENT_PREFIXES = ("slurmgen: hang", "slurmgen:   ", "slurmgen: failure", "slurmgen: the last run",
                  "slurmgen: no rank had begun")


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
          timeout: Optional[float] = None, out: TextIO = sys.stdout) -> str:
    """Print state and progress until the job ends; return its final state."""
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
        line = progress_line(state, last_progress(output_dir), restarts)
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
