"""Submit a JobSpec through submitit and follow it: the Python API behind `python -m slurmgen.submit`.

    from slurmgen.plan.spec import JobSpec
    from slurmgen.submit.submission import submit_job

    spec = JobSpec(gpus=(1, 1, 2, 2), module="train.sft",
                   train_args=("--model_name_or_path", "lm", "--dataset_name", "d.jsonl",
                               "--output_dir", "runs/sft")).validate()
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
import io
import json
import os
import re
import shlex
import shutil
import time
from pathlib import Path
from typing import Optional

from slurmgen.job import index
from slurmgen.plan import sweep
from slurmgen.plan.launch import container_exec
from slurmgen.plan.spec import JobSpec
from slurmgen.plan.words import SpecError
from slurmgen.submit import submitit_adapter
from slurmgen.submit.handle import JobFailed, Status, Submission, SubmitError
from slurmgen.submit.parameters import (check_submittable, local_parameters, make_task, resolve_output_dir,
                                        slurm_parameters, time_minutes, world_size)

__all__ = ["JobFailed", "Status", "Submission", "SubmitError", "attach", "submit_job", "submit_sweep"]


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
               dependency: str = "", task=None) -> "Submission":
    """Submit `spec` (already validated) and return a handle at once.

    folder: where submitit keeps the job's pickles and the per-task logs
    ({job}_{task}_log.out/.err); default: <spec.log_dir>/submitit.
    local: run on this machine with submitit's LocalExecutor (world size = sum of GPUs).
    dependency: sbatch's --dependency (a sweep's chain); --after's conditions are added.
    task: what every rank runs (default: the spec's training, parameters.make_task; slurmgen.run's function).
    """
    check_submittable(spec)
    if spec.sweep:
        raise SpecError("--sweep: submit_sweep() submits a sweep, one job per run")
    if local and spec.after:
        raise SpecError("--after: not with --local (there is no Slurm job to wait for)")
    folder_path = Path(folder or default_folder(spec.log_dir)).expanduser().absolute()
    made = _outermost_missing(folder_path)
    submitted_at = time.time() - 1  # file times may lag the clock by a little
    try:
        executor = _executor(spec, folder_path, local, dependency)
        # local: a Ctrl-C must reach only this process, which asks before cancelling; Slurm: sbatch's
        # stderr comes back in the error, which submitit would otherwise print whole first
        with submitit_adapter.own_session() if local else contextlib.redirect_stderr(io.StringIO()):
            job = executor.submit(task or make_task(spec, local))
    except Exception as err:  # sbatch's refusal arrives as a multi-line FailedJobError
        if made:  # nothing of a job that was never submitted stays behind (logs/submitit)
            shutil.rmtree(made, ignore_errors=True)
        if isinstance(err, SubmitError):
            raise
        raise SubmitError(_first_meaningful_line(str(err))) from None
    sub = Submission(job, folder_path, world_size(spec), resolve_output_dir(spec.train_args), local,
                     submitted_at)
    if not local:  # a local job dies with this process: nothing to attach to later
        _write_record(sub)
        index.write(index_entry(sub, spec, task))
    return sub


def index_entry(sub: "Submission", spec: JobSpec, task=None) -> index.Entry:
    """The submitted job in the user's index (slurmgen status, logs, list): rank R's logs are submitit's
    {job}_{R}_log.out and .err in its folder."""
    from slurmgen.job.record import JobFiles

    kind, name = task.target if task is not None else spec.target
    command = shlex.join([*(["-m"] if kind == "module" else []), name, *spec.train_args])
    folder = str(JobFiles.of(sub.folder, sub.job_id).folder)
    return index.Entry(index.cluster_name(), sub.job_id, index.SUBMITTED, folder,
                       task_logs=str(sub.folder / f"{sub.job_id}_{{rank}}_log"), name=spec.job_name, command=command,
                       world_size=sub.world_size, output_dir=str(sub.output_dir or ""), started=sub.submitted_at)


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


def _outermost_missing(path: Path) -> Optional[Path]:
    """The outermost directory of `path` that does not exist yet (None when it does)."""
    missing = None
    while not os.path.lexists(path):
        missing, path = path, path.parent
    return missing


def _first_meaningful_line(text: str) -> str:
    """Why sbatch refused: its fatal line (a Slurm that cannot read its configuration prints several
    errors before it), else its last error (`Batch job submission failed: ...`)."""
    lines = [l.strip() for l in text.splitlines() if l.strip()]
    said = [line for line in lines if line.startswith("sbatch: ")]
    fatal = [line for line in said if line.startswith("sbatch: fatal")]
    errors = [line for line in said if "error" in line.lower()]
    if fatal or errors:
        return (fatal or errors[-1:])[0]
    for line in lines:
        if "error" in line.lower() and "Command" not in line:
            return line
    return lines[-1] if lines else "submission failed"


