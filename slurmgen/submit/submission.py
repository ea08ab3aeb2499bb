"""Submit a JobSpec through submitit and follow it: the Python API behind `python -m slurmgen.submit`.

    from slurmgen.plan.spec import JobSpec
    from slurmgen.submit.submission import submit_job

    spec = JobSpec(gpus=(1, 1, 2, 2), module="train.sft",
                   train_args=("--model_name_or_path", "lm", "--output_dir", "runs/sft")).validate()
    job = submit_job(spec)                 # returns once Slurm accepted the job
    job.wait(progress=print)               # Status(state, restarts, progress) at every change
    metrics = job.result()                 # rank 0's metrics; JobFailed names the failing task
    job = attach(job.job_id, job.folder)   # later, from another process: the same handle

One Slurm task per GPU (`--nodes N --ntasks sum(gpus) --gpus-per-task 1`), each running
slurmgen.submit.task.TrainTask. State comes from `scontrol` (submitit asks `sacct`, which needs
accounting); results from submitit's per-task result pickles. No torch here.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import shlex
import subprocess
import time
from pathlib import Path
from typing import Callable, NamedTuple, Optional

from slurmgen.submit import submitit_adapter
from slurmgen.plan import sweep
from slurmgen.observe import watch
from slurmgen.site import jobs
from slurmgen.plan.launch import container_exec
from slurmgen.plan.spec import JobSpec
from slurmgen.plan.words import SpecError
from slurmgen.submit.blame import TaskFailure, pick_failed_task, srun_culprit, tail, task_host
from slurmgen.submit.hang_watch import HangWatch
from slurmgen.submit.parameters import check_submittable, local_parameters, make_task, resolve_output_dir, slurm_parameters, time_minutes, world_size

# A task that failed while others still run: cancel the rest after this many seconds, so a
# rank stuck in a collective does not hold the job until the collective timeout.
FAIL_FAST_S = 10.0


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


# ---------------------------------------------------------------------------- submission
def _executor(spec: JobSpec, folder: Path, local: bool, dependency: str = ""):
    python = None if spec.python == "python3" else spec.python  # default: this interpreter
    wrap = container_exec(spec, os.getcwd(), str(folder))
    if wrap and not local:  # apptainer: submitit's command for python, as it allows
        python = shlex.join([*wrap, spec.python])
    if local:
        from submitit import LocalExecutor

        executor = LocalExecutor(folder, max_num_timeout=spec.max_restarts, python=python)
        executor.update_parameters(**local_parameters(spec))
        return executor
    try:
        executor = submitit_adapter.slurm_executor(folder, world_size(spec), time_minutes(spec) is None,
                                                   max_num_timeout=spec.max_restarts, python=python)
    except RuntimeError as err:  # no srun on PATH
        raise SubmitError(f"{err} (use --local to run on this machine)") from None
    executor.update_parameters(**slurm_parameters(spec, folder, dependency))
    return executor


def default_folder(log_dir: str) -> str:
    """Where submitit's files go unless --folder says otherwise: beside the job logs."""
    return os.path.join(log_dir, "submitit")


def submit_job(spec: JobSpec, folder: Optional[str] = None, local: bool = False,
               dependency: str = "") -> "Submission":
    """Submit `spec` (already validated) and return a handle at once.

    folder: where submitit keeps the job's pickles and the per-task logs
    ({job}_{task}_log.out/.err); default: <spec.log_dir>/submitit.
    local: run on this machine with submitit's LocalExecutor (world size = sum of GPUs).
    dependency: sbatch's --dependency (a sweep's chain); --after's conditions are added.
    """
    check_submittable(spec)
    if spec.sweep:
        raise SpecError("--sweep: submit_sweep() submits a sweep, one job per run")
    if local and spec.after:
        raise SpecError("--after: not with --local (there is no Slurm job to wait for)")
    folder_path = Path(folder or default_folder(spec.log_dir)).expanduser().absolute()
    executor = _executor(spec, folder_path, local, dependency)
    submitted_at = time.time() - 1  # file times may lag the clock by a little
    try:
        # local: a Ctrl-C must reach only this process, which asks before cancelling
        with submitit_adapter.own_session() if local else contextlib.nullcontext():
            job = executor.submit(make_task(spec, local))
    except Exception as err:  # sbatch's refusal arrives as a multi-line FailedJobError
        raise SubmitError(_first_meaningful_line(str(err))) from None
    sub = Submission(job, folder_path, world_size(spec), resolve_output_dir(spec.train_args), local,
                     submitted_at)
    if not local:  # a local job dies with this process: nothing to attach to later
        _write_record(sub)
    return sub


def submit_sweep(spec: JobSpec, folder: Optional[str] = None) -> list:
    """A sweep's runs as Slurm jobs, one per run, run i after run i-N has ended (afterany), as
    rendered het sweeps are. Not one submitit array: submitit builds arrays with a plain
    SlurmExecutor of its own, which counts tasks as nodes x tasks-per-node (wrong for uneven
    layouts) and always writes a time limit. Each run's values go to RUN_DIR/sweep.json first.
    Returns [(Run, Submission)]."""
    runs = sweep.expand(spec.sweep, spec.sweep_mode, spec.train_args)
    waits = sweep.waits_for(len(runs), spec.max_parallel)
    out: list = []
    for run, wait in zip(runs, waits):
        run_dir = Path(run.output_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "sweep.json").write_text(run.values_json() + "\n")
        one = dataclasses.replace(spec, sweep=(), max_parallel=None, train_args=run.train_args)
        chain = f"afterany:{out[wait][1].job_id}" if wait is not None else ""
        out.append((run, submit_job(one, folder, dependency=chain)))
    return out


def _record_path(folder: Path, job_id: str) -> Path:
    return folder / f"{job_id}_slurmgen.json"


def _write_record(sub: "Submission") -> None:
    """What attach() needs and submitit's own files do not say: the task count and where the
    training writes its progress."""
    record = {"job_id": sub.job_id, "world_size": sub.world_size, "submitted_at": sub.submitted_at,
              "output_dir": str(sub.output_dir) if sub.output_dir else None}
    path = _record_path(sub.folder, sub.job_id)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record) + "\n")
    os.replace(tmp, path)


def attach(job_id: str, folder: str | os.PathLike) -> "Submission":
    """A handle on a job submitted earlier through submit_job (for instance with --detach),
    found in its submitit folder: wait, status, result, failure and cancel work as after submit."""
    job_id = str(job_id)
    if not re.fullmatch(r"\d+", job_id):
        raise SpecError(f"--attach {job_id!r}: not a Slurm job id (digits, as `--detach` printed)")
    folder_path = Path(folder).expanduser().absolute()
    path = _record_path(folder_path, job_id)
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        raise SubmitError(f"job {job_id} was not submitted through slurmgen into {folder_path} "
                          f"(no readable {path.name}; pass the submitit folder it printed with --folder)") from None
    world = int(record["world_size"])
    job = submitit_adapter.slurm_job(folder_path, job_id, world)
    output_dir = Path(record["output_dir"]) if record.get("output_dir") else None
    return Submission(job, folder_path, world, output_dir, False, float(record["submitted_at"]))


def _first_meaningful_line(text: str) -> str:
    lines = [l.strip() for l in text.splitlines() if l.strip()]
    for line in lines:
        if "error" in line.lower() and "Command" not in line:
            return line
    return lines[-1] if lines else "submission failed"


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

    def __repr__(self) -> str:
        return f"Submission(job_id={self.job_id!r}, folder={str(self.folder)!r})"

    # ------------------------------------------------------------------ files
    def _paths(self, task: int):
        return submitit_adapter.job_paths(self.folder, self.job_id, task)

    def logs(self) -> list[tuple[Path, Path]]:
        """(stdout, stderr) log paths of every task, rank order."""
        return [(p.stdout, p.stderr) for p in map(self._paths, range(self.world_size))]

    def _outcomes(self) -> dict:
        """task -> (outcome "success"/"error", mtime) for tasks that wrote a result."""
        found = {}
        for task in range(self.world_size):
            path = self._paths(task).result_pickle
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
        self.cancel()
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

    def cancel(self) -> None:
        if self.local:
            self._job.cancel()
        else:
            subprocess.run(["scancel", self.job_id], check=False, capture_output=True)


    def end_for_good(self, timeout: float = 180.0) -> None:
        """Cancel the job and keep it cancelled: a task that was already stopping when the
        cancel's TERM came may still requeue it. Returns once no step is left (nothing can
        requeue it any more) or after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            states = {r.get("JobState") for r in jobs.job_records(self.job_id)}
            if states <= jobs.TERMINAL:  # COMPLETING is not: steps are still ending
                return
            if states & {"PENDING", "REQUEUED", "RUNNING", "CONFIGURING", "SUSPENDED"}:
                self.cancel()
            time.sleep(1.0)


