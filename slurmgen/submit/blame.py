"""Which task of a submitted job failed, on which node, and the last lines it wrote."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from slurmgen.submit.task import START_MARK


TAIL_LINES = 20


@dataclass(frozen=True)
class TaskFailure:
    task: Optional[int]  # None: no task to blame (cancelled, timed out): the batch log
    host: Optional[str]
    stderr: Path
    tail: str

    @property
    def name(self) -> str:
        if self.task is None:
            return "the job"
        return f"task {self.task} on {self.host}" if self.host else f"task {self.task}"


# tqdm bars (redrawn with \r, so many "lines") say nothing about why a task failed.
_PROGRESS_BAR = re.compile(r"\d+%\|.*\|")


def tail(path: Path, lines: int = TAIL_LINES) -> str:
    """The last lines of a log, without blank lines and progress bars."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    kept = [l for l in text.splitlines() if l.strip() and not _PROGRESS_BAR.search(l)]
    return "\n".join(kept[-lines:])


def task_host(stdout: Path) -> Optional[str]:
    """The host a task ran on, from the line TrainTask prints first (the newest such line:
    logs are appended to, and a requeued run may land elsewhere)."""
    host = None
    try:
        with stdout.open(errors="replace") as handle:
            for line in handle:
                if line.startswith(START_MARK) and " on " in line:
                    # "slurmgen-task: task 3 on node3: rank 3/6 ..."
                    host = line.split(" on ", 1)[1].split(":", 1)[0].strip()
    except OSError:
        pass
    return host


def pick_failed_task(outcomes: dict, window: float = 1.0) -> Optional[int]:
    """The task that raised first (of ranks that fail together, as on a bad argument, within
    `window` seconds: the lowest); None when no task raised."""
    errors = [(mtime, task) for task, (outcome, mtime) in outcomes.items() if outcome == "error"]
    if not errors:
        return None
    first = min(mtime for mtime, _ in errors)
    return min(task for mtime, task in errors if mtime - first <= window)


# srun's report of a task that ended badly: "srun: error: node4: task 1: Aborted",
# "srun: error: node3: tasks 2-3: Killed".
_SRUN_TASK_ERROR = re.compile(r"srun: error: (\S+): tasks? (\d+)(?:-\d+)?: (.+)")


_COLLATERAL = ("Killed", "Terminated")  # what --kill-on-bad-exit does to the other tasks


def srun_culprit(batch_log: str) -> Optional[tuple[int, str]]:
    """(task, host) of the newest task srun saw die on its own (crash, abort, bad exit status)
    rather than be killed because another one failed; None if there is none."""
    found = None
    for match in _SRUN_TASK_ERROR.finditer(batch_log):
        if match.group(3).strip() not in _COLLATERAL:
            found = (int(match.group(2)), match.group(1))
    return found
