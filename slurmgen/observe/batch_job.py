"""The handle of a rendered script submitted with sbatch (slurmgen.Job.submit(via="sbatch"),
slurmgen.attach): its state from scontrol, waiting for its end, its logs and a final cancel as
`slurmgen logs` and `slurmgen cancel` have them, and rank 0's progress and metrics.json from the
training --output_dir. The submit path's handle is slurmgen.submit.handle.Submission."""

from __future__ import annotations

import json
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

    def _found(self):
        """The job as `slurmgen logs`/`cancel` find it: the index, else scontrol's record (still pending)."""
        from slurmgen.observe.job_life import find

        return find(self.job_id, need_slurm=False)

    def cancel(self, wait: Optional[float] = None) -> str:
        """Cancel for good, as `slurmgen cancel` does (marked in the job folder, so a warning's requeue
        cannot bring it back); returns the command's line. LifeError (one line) when scancel refuses."""
        from slurmgen.observe import life_handle

        found = self._found()
        return life_handle.cancel(found) if wait is None else life_handle.cancel(found, wait)

    def log_files(self, rank: Optional[int] = None) -> list[Path]:
        """The files `slurmgen logs JOB [--rank R]` reads: the batch script's log (and error log)."""
        from slurmgen.observe import life_handle

        return life_handle.log_files(self._found().entry, rank)

    def logs(self, rank: Optional[int] = None) -> str:
        """The job's log now, or rank R's lines in it (those labelled [rankR]:), as `slurmgen logs` prints."""
        from slurmgen.observe import life_handle

        return life_handle.log_text(self._found().entry, rank)

    def metrics(self) -> Optional[dict]:
        """Rank 0's metrics.json from the training --output_dir; None until the run has written it."""
        path = self.output_dir and self.output_dir / "metrics.json"
        if not path or not path.is_file():
            return None
        return json.loads(path.read_text())
