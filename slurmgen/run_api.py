"""slurmgen.run: a Python function on every rank of a job, rank 0's return value back.

    def total(scale):
        import torch, torch.distributed as dist
        dist.init_process_group("gloo")            # from env://: RANK, WORLD_SIZE, MASTER_ADDR/PORT
        t = torch.tensor([dist.get_rank() * scale])
        dist.all_reduce(t)
        return int(t)

    slurmgen.run(total, 1, nodes=4, gpus=[1, 1, 2, 2], time="0:10:00")   # 15

The job goes through the submit path (one Slurm task per GPU, slurmgen.submit.function_task) with
the options Job(...) takes, under the same names and checks; it is followed with the hang watch
(--hang-timeout) and stops cleanly at the time-limit warning, as `slurmgen submit` does. A failure
raises the submit path's JobFailed (which task, on which node; its log tail on .failure)."""

from __future__ import annotations

from typing import Any, Callable, Optional

# Job options that name what the ranks run: slurmgen.run runs fn(*args) instead.
TARGET_OPTIONS = ("script", "module", "exec", "args")


def run(fn: Callable, *args, local: bool = False, folder: Optional[str] = None,
        timeout: Optional[float] = None, **job_options) -> Any:
    """Run fn(*args) on every rank of the job `job_options` describe (nodes, gpus, time, partition, ...:
    Job's keywords) and return rank 0's return value. The distributed environment is set, the process
    group is not: fn calls torch.distributed.init_process_group("nccl" or "gloo"), env:// by default.
    local: run every rank on this machine with submitit's local executor (no Slurm; sum(gpus) ranks).
    folder: submitit's (default LOG_DIR/submitit). timeout: seconds to wait before JobError (the job
    goes on). Raises JobError for a bad option (one line), JobFailed when a rank fails."""
    from slurmgen.job_api import Job, JobError, _checked

    if not callable(fn):
        raise JobError(f"fn={fn!r}: slurmgen.run needs a function to call on every rank")
    given = [name for name in TARGET_OPTIONS if job_options.get(name) is not None]
    if given:
        raise JobError(f"{given[0]}=...: slurmgen.run runs fn(*args) on every rank; use Job(...).submit() to run"
                       " a script, a module or a program")
    spec = Job(**job_options).spec
    sub = _checked(lambda: _submit(spec, fn, args, folder, local))
    watch = sub.hang_watch(spec.hang_timeout, spec.nodes) if spec.hang_timeout and not local else None
    if sub.wait(poll=watch, timeout=timeout) == "WAIT_TIMEOUT":
        raise JobError(f"job {sub.job_id} still runs after {timeout:g} s (slurmgen.attach({sub.job_id!r}) to follow it)")
    return sub.result()


def _submit(spec, fn, args, folder, local):
    from slurmgen.submit.function_task import FunctionTask
    from slurmgen.submit.parameters import make_task
    from slurmgen.submit.submission import submit_job

    task = FunctionTask.of(make_task(spec, local), fn, args, rank_hooks=spec.rank_hooks)
    return submit_job(spec, folder, local, task=task)
