"""The handle of a rendered script submitted with sbatch (slurmgen.Job.submit(via="sbatch")): its
state from scontrol, waiting for its end, cancelling it, and rank 0's progress and metrics.json
from the training --output_dir. The submit path's handle is slurmgen.submit.handle.Submission."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Optional

from slurmgen.observe.watch import last_progress
from slurmgen.site.jobs import TERMINAL, job_records, overall_state


class BatchJob:
    """A job sbatch accepted: job_id, script, output_dir (where metrics.json lands; None without
    an --output_dir in the training arguments)."""

    def __init__(self, job_id: str, script: Path, output_dir: Optional[Path]):
        self.job_id, self.script, self.output_dir = str(job_id), script, output_dir

    def __repr__(self) -> str:
        return f"BatchJob(job_id={self.job_id!r}, script={str(self.script)!r})"

    def state(self) -> str:
        """Slurm's state (PENDING, RUNNING, COMPLETED, FAILED, ...); a het job's worst component."""
        return overall_state(job_records(self.job_id))

    def done(self) -> bool:
        return self.state() in TERMINAL

    def progress(self) -> Optional[dict]:
        """The newest line of rank 0's progress.jsonl (step, loss), or None before the first step."""
        return last_progress(self.output_dir)

    def wait(self, timeout: Optional[float] = None, interval: float = 2.0) -> str:
        """Poll until the job ends; its final state, or "WAIT_TIMEOUT" after `timeout` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            state = self.state()
            if state in TERMINAL:
                return state
            if deadline is not None and time.monotonic() > deadline:
                return "WAIT_TIMEOUT"
            time.sleep(interval)

    def cancel(self) -> None:
        subprocess.run(["scancel", self.job_id], check=False, capture_output=True)

    def logs(self) -> list[Path]:
        """The batch script's log files as Slurm names them (StdOut, and StdErr where it differs)."""
        records = job_records(self.job_id)
        found = [records[0].get(key, "") for key in ("StdOut", "StdErr")] if records else []
        return [Path(p) for p in dict.fromkeys(found) if p not in ("", "(null)")]

    def metrics(self) -> Optional[dict]:
        """Rank 0's metrics.json from the training --output_dir; None until the run has written it."""
        path = self.output_dir and self.output_dir / "metrics.json"
        if not path or not path.is_file():
            return None
        return json.loads(path.read_text())
