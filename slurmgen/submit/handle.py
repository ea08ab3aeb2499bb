"""A submitted job's handle: its state from scontrol or the local executor, its tasks' results,
which task failed, waiting, its logs and a final cancel as `slurmgen logs` and `slurmgen cancel` have
them; what submit_job and attach return."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Callable, NamedTuple, Optional

from slurmgen.job.record import SETTLE_SECONDS
from slurmgen.observe import watch
from slurmgen.site import jobs
from slurmgen.submit import submitit_adapter
from slurmgen.submit.blame import TaskFailure, pick_failed_task, srun_culprit, tail, task_host
from slurmgen.submit.hang_watch import HangWatch


# A task that failed while others still run: cancel the rest after this many seconds (the job
# runtime's settle time), so a rank stuck in a collective does not hold the job until the
# collective timeout.
FAIL_FAST_S = SETTLE_SECONDS


class SubmitError(RuntimeError):
    """The job could not be submitted (no Slurm here, sbatch refused it) or attached to; one line."""


class JobFailed(RuntimeError):
    """The job ended without success. `failure` names the task and holds its log tail."""

    def __init__(self, job_id: str, state: str, failure: Optional["TaskFailure"]):
        self.job_id, self.state, self.failure = job_id, state, failure
        where = f": {failure.name} failed" if failure and failure.task is not None else ""
        super().__init__(f"job {job_id} {state}{where}")


class Status(NamedTuple):
    state: str  # Slurm's JobState (PENDING, RUNNING, COMPLETED, FAILED, ...)
    restarts: str  # how often Slurm requeued it
    progress: Optional[dict]  # newest line of rank 0's progress.jsonl
    reason: str = ""  # why it is pending (Resources, Priority, PartitionNodeLimit, ...)


class Submission:
    """A submitted job: state, progress, logs, rank 0's result, cancel."""

    def __init__(self, job, folder: Path, world: int, output_dir: Optional[Path], local: bool,
                 submitted_at: float = 0.0):
        self._job = job
        self.submitted_at = submitted_at
        self.job_id: str = str(job.job_id)
        self.folder = folder
        self.world_size = world
        self.output_dir = output_dir
        self.local = local
        self._error_seen: Optional[float] = None
        self.cancelled_here = False  # by _scancel(): fail-fast, the hang watch; not cancel() nor a user's scancel
        self.failed_fast = False  # _scancel() because a task had failed: Slurm's CANCELLED is that failure

    def __repr__(self) -> str:
        return f"Submission(job_id={self.job_id!r}, folder={str(self.folder)!r})"

    # ------------------------------------------------------------------ files
    def _paths(self, task: int):
        return submitit_adapter.job_paths(self.folder, self.job_id, task)

    def _entry(self):
        """The job as the user's index holds it (submission.index_entry): rank R's logs are submitit's
        {job}_{R}_log.out and .err; a local job has the same files and no entry."""
        from slurmgen.job import index
        from slurmgen.job.record import JobFiles

        return index.Entry("", self.job_id, index.SUBMITTED,
                           str(JobFiles.of(self.folder, self.job_id).folder), world_size=self.world_size,
                           task_logs=str(self.folder / f"{self.job_id}_{{rank}}_log"))

    def log_files(self, rank: Optional[int] = None) -> list[Path]:
        """Rank R's stdout and stderr files (None: rank 0's, where the batch script writes too)."""
        from slurmgen.observe import life_handle

        return life_handle.log_files(self._entry(), rank)

    def logs(self, rank: Optional[int] = None) -> str:
        """Rank R's output now (stdout, then stderr), as `slurmgen logs JOB --rank R` prints it."""
        from slurmgen.observe import life_handle

        return life_handle.log_text(self._entry(), rank)

    def _outcomes(self) -> dict:
        """task -> (outcome "success"/"error", mtime) for tasks that wrote a result."""
        found = {}
        folder = self._paths(0).result_pickle.parent
        try:  # one listing, not a stat per task per poll (8,192 tasks on a shared file system)
            present = {entry.name for entry in os.scandir(folder)}
        except OSError:
            return found
        for task in range(self.world_size):
            path = self._paths(task).result_pickle
            if path.name not in present:
                continue
            try:
                mtime = path.stat().st_mtime
                if mtime < self.submitted_at:
                    continue  # an older job's, after the cluster reused the job id
                found[task] = (submitit_adapter.result_outcome(path), mtime)
            except (OSError, EOFError, IndexError, TypeError):
                continue  # not written (yet), or being written
        return found

    # ------------------------------------------------------------------ state
    def status(self) -> Status:
        state, restarts, reason = self._scheduler_state()
        return Status(state, restarts, watch.last_progress(self.output_dir), reason)

    def state(self) -> str:
        return self._scheduler_state()[0]

    def done(self) -> bool:
        return self.state() in jobs.TERMINAL

    def _scheduler_state(self) -> tuple[str, str, str]:
        if self.local:
            return self._local_state(), "0", ""
        records = jobs.job_records(self.job_id)
        if not records:  # scontrol has forgotten it (MinJobAge): judge from the results
            return self._state_from_results("UNKNOWN"), "0", ""
        state = jobs.overall_state(records)
        if state == "CANCELLED" and self.failed_fast:
            state = "FAILED"  # our fail-fast cancel of a job whose task failed (a later wait() reads it too)
        reason = records[0].get("Reason", "") if state == "PENDING" else ""
        return state, records[0].get("Restarts", "0"), "" if reason == "None" else reason

    def _local_state(self) -> str:
        raw = self._job.state  # submitit's local names, not Slurm's
        if raw == submitit_adapter.LOCAL_RUNNING:
            return "RUNNING"
        interrupted = raw == submitit_adapter.LOCAL_INTERRUPTED
        return self._state_from_results("CANCELLED" if interrupted else "FAILED")

    def _state_from_results(self, otherwise: str) -> str:
        outcomes = self._outcomes()
        if len(outcomes) == self.world_size and all(o == "success" for o, _ in outcomes.values()):
            return "COMPLETED"
        if any(o == "error" for o, _ in outcomes.values()):
            return "FAILED"
        return otherwise

    def _fail_fast(self, state: str) -> bool:
        """Cancel a job whose tasks failed while others are still running (stuck in a collective)."""
        if state != "RUNNING" or not any(o == "error" for o, _ in self._outcomes().values()):
            return False
        now = time.monotonic()
        self._error_seen = self._error_seen or now
        if now - self._error_seen < FAIL_FAST_S:
            return False
        self.failed_fast = True
        self._scancel()
        return True

    def wait(self, progress: Optional[Callable[[Status], None]] = None, interval: float = 1.0,
             timeout: Optional[float] = None, poll: Optional[Callable[[Status], None]] = None) -> str:
        """Poll until the job ends; call progress(status) whenever it changes, and poll(status)
        at every poll (the hang watch). Returns the state (or "WAIT_TIMEOUT" after `timeout`
        seconds, the job still running)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        previous = None
        while True:
            status = self.status()
            if self._fail_fast(status.state):
                status = status._replace(state="FAILED")
            if progress is not None and status != previous:
                progress(status)
                previous = status
            if poll is not None and status.state == "RUNNING":
                poll(status)
            if status.state in jobs.TERMINAL:
                return status.state
            if deadline is not None and time.monotonic() > deadline:
                return "WAIT_TIMEOUT"
            time.sleep(interval)

    # ------------------------------------------------------------------ results
    def failure(self) -> Optional[TaskFailure]:
        """What went wrong: the failing task (the first that raised, else the one srun saw crash)
        and the tail of its error log. None if the job completed and every task succeeded."""
        outcomes = self._outcomes()
        all_ok = len(outcomes) == self.world_size and all(o == "success" for o, _ in outcomes.values())
        if all_ok and self.state() == "COMPLETED":
            return None
        batch = self._paths(0)  # submitit sends the batch script's output to task 0's logs
        task, host = pick_failed_task(outcomes), None
        if task is None and not self.local:
            task, host = srun_culprit(tail(batch.stderr, 200)) or (None, None)
        paths = self._paths(task) if task is not None else batch
        text = tail(paths.stderr) or tail(paths.stdout)
        return TaskFailure(task, host or (task_host(paths.stdout) if task is not None else None),
                           paths.stderr, text)

    def crashed_host(self) -> Optional[str]:
        """The node where the failure began as srun saw it (a task that died on its own rather
        than from the broken collective: slurmgen.job.retry.crashed_node); None if it cannot be told."""
        from slurmgen.job.retry import crashed_node

        return None if self.local else crashed_node(tail(self._paths(0).stderr, 400)) or None

    def hang_watch(self, timeout: float, nodes: int, printer=None) -> "HangWatch":
        return HangWatch(self, timeout, nodes, printer)

    def metrics_file(self) -> Optional[Path]:
        if self.output_dir is None:
            return None
        path = self.output_dir / "metrics.json"
        return path if path.is_file() else None

    def metrics(self) -> Optional[dict]:
        """Rank 0's metrics.json from the training --output_dir; None until the run has written it."""
        import json

        path = self.metrics_file()
        return json.loads(path.read_text()) if path else None

    def result(self) -> Optional[dict]:
        """Rank 0's metrics once the job is over. Raises JobFailed unless every task succeeded."""
        state = self.wait()
        failure = self.failure()
        if state != "COMPLETED" or failure is not None:
            raise JobFailed(self.job_id, "FAILED" if state == "COMPLETED" else state, failure)
        metrics = self._job.task(0).result()
        if metrics is None and self.metrics_file():  # --script: nothing returned in-process
            import json

            metrics = json.loads(self.metrics_file().read_text())
        return metrics

    def cancel(self) -> str:
        """The user's cancel, final as `slurmgen cancel` is: marked in the job's folder, so no task
        requeues it at the cancel's TERM, and no retry follows. Returns the command's line."""
        if self.local:
            self._job.cancel()
            return f"job {self.job_id} cancelled"
        from slurmgen.observe import life_handle
        from slurmgen.observe.job_life import Found

        return life_handle.cancel(Found(self._entry(), jobs.job_records(self.job_id)))

    def _scancel(self) -> None:
        """slurmgen's own cancel (fail-fast, the hang watch): a failure the submit command may retry."""
        self.cancelled_here = True
        if self.local:
            self._job.cancel()
        else:
            subprocess.run(["scancel", self.job_id], check=False, capture_output=True)

    def end_for_good(self, timeout: float = 180.0) -> None:
        """Cancel the job and keep it cancelled: a task that was already stopping when the
        cancel's TERM came may still requeue it. Returns once no step is left (nothing can
        requeue it any more) or after `timeout` seconds."""
        jobs.end_for_good(self.job_id, self._scancel, timeout)
