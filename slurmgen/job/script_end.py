"""Whether a failed run had in fact finished: every rank's script reached its end (train.script_end's
mark, one per rank in the job's beats folder, this run's), and the failure came after that, in
Python's exit (with gloo, torch's threads torn down in a C++ destructor: "terminate called without an
active exception", SIGABRT). Such a job is finished: no failure counted, never requeued. A mark
missing from any rank: a real failure, judged as before."""

from __future__ import annotations

import re
import signal

from slurmgen.job import retry
from slurmgen.job.checks import say

# torchrun's summary of its first failed worker: its global rank and exit code (-N: signal N)
_ROOT_CAUSE = re.compile(r"Root Cause \(first observed failure\):.*?\brank\s*:\s*(?P<rank>\d+).*?"
                         r"\bexitcode\s*:\s*(?P<code>-?\d+)", re.S)
# srun's line for a task a signal ended (--launcher srun): "srun: error: node1: task 0: Aborted (core dumped)"
_SRUN_SIGNALLED = re.compile(r"^srun: error: (?P<host>\S+): tasks? (?P<tasks>[\d,-]+): (?!Exited)(?P<what>.+)$", re.M)


def every_rank_ended(files, world_size: int) -> bool:
    return world_size > 0 and all(files.ended(rank).exists() for rank in range(world_size))


def who_failed(log: str) -> str:
    """The rank that failed after its end, as the job log tells it: "rank 0 aborted (SIGABRT)"."""
    log = retry.last_run(log)
    cause = _ROOT_CAUSE.search(log)
    if cause:
        code = int(cause["code"])
        how = f"was ended by {_signal_name(-code)}" if code < 0 else f"exited with status {code}"
        return f"rank {cause['rank']} {how}"
    task = _SRUN_SIGNALLED.search(log)
    if task:
        return f"task {task['tasks']} on {task['host']} ended: {task['what'].strip()}"
    return "a rank failed"


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def finished_after_all(files, world_size: int, slurm_api, job: str) -> bool:
    """True, said in one line, when every rank had ended its script before the run failed."""
    if not every_rank_ended(files, world_size):
        return False
    log = slurm_api.read_log(slurm_api.job_info(job, files).log)
    say(f"slurmgen: every rank ended its script; {who_failed(log)} in Python's exit after that (as gloo's"
        " 'terminate called without an active exception'): the job finished, not retried")
    return True


def program_status(command: list[str], environ) -> int:
    """The submit path's --exec program, run in its task to its end: its exit status, or 0 where its rank
    ended its script (the mark, when the program is Python under the rank hooks) and failed after that, in
    Python's exit. (Scripts and modules run in the task's own process, which leaves by os._exit(0) once
    they succeed: no teardown to abort in.)"""
    import subprocess
    from pathlib import Path

    from slurmgen.contract import ENDED_FILE, HEARTBEAT_DIR_ENV

    folder = environ.get(HEARTBEAT_DIR_ENV)
    mark = Path(folder) / ENDED_FILE.format(rank=environ.get("RANK", "0")) if folder else None
    if mark is not None:
        mark.unlink(missing_ok=True)  # an earlier run's
    status = subprocess.run(command).returncode  # environ: this process's, which the program inherits
    if status and mark is not None and mark.exists():
        say(f"slurmgen: rank {environ.get('RANK', '0')} ended its script, then exit status {status} in Python's"
            " exit after that: the task succeeded")
        return 0
    return status
