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
(--hang-timeout), stops cleanly at the time-limit warning, and after a crash or a hang is submitted
again up to max_failures times, a node blamed twice left out: `slurmgen submit`'s retries, by the one
decision slurmgen.submit.resubmit makes for both. A retried function starts again from the top (it
resumes only from what it saved itself). A failure that stands raises the submit path's JobFailed
(which task, on which node; its log tail on .failure)."""

from __future__ import annotations

import sys
import time
from typing import Any, Callable, Optional

# Job options that name what the ranks run: slurmgen.run runs fn(*args) instead.
TARGET_OPTIONS = ("script", "module", "exec", "args")


def run(fn: Callable, *args, local: bool = False, folder: Optional[str] = None,
        timeout: Optional[float] = None, say: Optional[Callable[[str], None]] = None, **job_options) -> Any:
    """Run fn(*args) on every rank of the job `job_options` describe (nodes, gpus, time, partition,
    max_failures, ...: Job's keywords) and return rank 0's return value. The distributed environment is
    set, the process group is not: fn calls torch.distributed.init_process_group("nccl" or "gloo"),
    env:// by default. After a crash or a hang the job is submitted again (max_failures, default 2; 0:
    never) and fn called again from the top; say(line) is told why (default: "slurmgen: LINE" on stderr).
    local: run every rank on this machine with submitit's local executor (no Slurm; sum(gpus) ranks;
    never retried). folder: submitit's (default LOG_DIR/submitit). timeout: seconds to wait, retries
    included, before JobError (the job goes on). Raises JobError for a bad option (one line), JobFailed
    when a rank's failure stands."""
    from slurmgen.job_api import Job, JobError

    if not callable(fn):
        raise JobError(f"fn={fn!r}: slurmgen.run needs a function to call on every rank")
    given = [name for name in TARGET_OPTIONS if job_options.get(name) is not None]
    if given:
        raise JobError(f"{given[0]}=...: slurmgen.run runs fn(*args) on every rank; use Job(...).submit() to run"
                       " a script, a module or a program")
    return _submit_until_done(Job(**job_options).spec, fn, args, folder, local, timeout, say or _say)


def _submit_until_done(spec, fn, args, folder, local, timeout, say) -> Any:
    """Submit, follow, and submit again while the failure policy allows (never a local run)."""
    from slurmgen.job_api import JobError, _checked
    from slurmgen.submit import resubmit
    from slurmgen.submit.handle import JobFailed

    deadline = None if timeout is None else time.monotonic() + timeout
    retries = resubmit.Retries.of(spec)
    while True:
        sub = _checked(lambda: _submit(spec, fn, args, folder, local))
        watch = sub.hang_watch(spec.hang_timeout, spec.nodes) if spec.hang_timeout and not local else None
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        if sub.wait(poll=watch, timeout=left) == "WAIT_TIMEOUT":
            raise JobError(f"job {sub.job_id} still runs after {timeout:g} s (slurmgen.attach({sub.job_id!r})"
                           " to follow it)")
        try:
            return sub.result()
        except JobFailed as err:
            if local:
                raise
            step = resubmit.after_failure(spec, sub, err, watch, retries, function=True)
            for line in step.lines:
                say(line)
            if step.spec is None:
                raise
            spec, retries = step.spec, step.retries


def _say(line: str) -> None:
    print(f"slurmgen: {line}", file=sys.stderr, flush=True)


def _submit(spec, fn, args, folder, local):
    from slurmgen.submit.function_task import FunctionTask
    from slurmgen.submit.parameters import make_task
    from slurmgen.submit.submission import submit_job

    task = FunctionTask.of(make_task(spec, local), fn, args, rank_hooks=spec.rank_hooks)
    return submit_job(spec, folder, local, task=task)
