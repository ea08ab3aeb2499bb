"""What a job's Python handles (slurmgen.Job's BatchJob, the submit path's Submission) share with
`slurmgen logs` and `slurmgen cancel`: rank R's log as the command shows it, and the final cancel,
through the very functions the commands use (slurmgen.observe.job_logs, job_life)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Optional

from slurmgen.job import index
from slurmgen.observe.job_life import CANCEL_WAIT, Found, cancel_for_good
from slurmgen.observe.job_logs import follow, select


def log_files(entry: index.Entry, rank: Optional[int]) -> list[Path]:
    """The files `slurmgen logs JOB [--rank R]` reads. ValueError (one line) for a rank the job lacks."""
    return select(entry, rank).paths


def log_text(entry: index.Entry, rank: Optional[int]) -> str:
    """What `slurmgen logs JOB [--rank R]` prints now: the job's log, or rank R's lines (a rendered
    job's lines labelled [rankR]:, a submitted job's own files); "" before anything is written."""
    out = io.StringIO()
    follow(select(entry, rank), lambda: True, out, once=True)
    return out.getvalue()


def cancel(found: Found, wait: float = CANCEL_WAIT) -> str:
    """`slurmgen cancel`'s: the mark in the job's folder, scancel, then again until no step is left."""
    return cancel_for_good(found, wait)
