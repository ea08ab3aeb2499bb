"""Everything slurmgen needs from submitit beyond its public API, in one place.

submitit has no public way to say "6 tasks on 4 nodes" (1,1,2,2 GPUs), to leave out
`#SBATCH --time`, or to start the local controller in its own session; and the job files and
task environment slurmgen reads are its conventions, not documented API. Each of those is one
small name here. tests/test_submitit_adapter.py checks every one against the installed
submitit and names what changed when an upgrade breaks one.

Written against submitit 1.5.4 (setup.cfg asks for submitit>=1.5).

submitit is imported inside the functions only: the CLI imports this module on every run and
each task imports it before training starts; both must stay light (no torch, no submitit).
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import types
from pathlib import Path

WRITTEN_AGAINST = "1.5.4"

# ------------------------------------------------------------------------- task environment
# What submitit sets in every task. slurmgen's tasks read these from a plain mapping
# (task.prepare_environ is pure on it), not through submitit's JobEnvironment.
EXECUTOR_ENV = "SUBMITIT_EXECUTOR"  # the executor's name
LOCAL_EXECUTOR = "local"  # ... under LocalExecutor
FOLDER_ENV = "SUBMITIT_FOLDER"  # the executor's folder
PREEMPT_SIGNAL_ENV = "SUBMITIT_PREEMPT_SIGNAL"  # signal name without SIG
DEFAULT_PREEMPT_SIGNAL = "USR2"
# LocalExecutor sets no RANK or WORLD_SIZE, only these (keys as in submitit's JobEnvironment).
LOCAL_ENV = {"num_tasks": "SUBMITIT_LOCAL_NTASKS", "global_rank": "SUBMITIT_LOCAL_GLOBALID",
             "local_rank": "SUBMITIT_LOCAL_LOCALID", "job_id": "SUBMITIT_LOCAL_JOB_ID"}

# LocalJob.state while its controller runs, and once a signal ended it.
LOCAL_RUNNING = "RUNNING"
LOCAL_INTERRUPTED = "INTERRUPTED"


def preempt_signal(environ=None) -> signal.Signals:
    """The signal on which submitit's handler in a task checkpoints and requeues."""
    environ = os.environ if environ is None else environ
    return getattr(signal, "SIG" + environ.get(PREEMPT_SIGNAL_ENV, DEFAULT_PREEMPT_SIGNAL))


# ------------------------------------------------------------------------- Slurm executor
@functools.lru_cache(maxsize=None)
def slurm_executor_class():
    """submitit's SlurmExecutor with slurmgen's task count and optional time limit."""
    from submitit import SlurmExecutor

    class Executor(SlurmExecutor):
        def __init__(self, folder, world: int, no_time_limit: bool, **kwargs):
            super().__init__(folder, **kwargs)  # RuntimeError if srun is not on PATH
            self.world, self.no_time_limit = world, no_time_limit

        def _num_tasks(self) -> int:
            # submitit counts nodes x ntasks_per_node (4 for 1,1,2,2); this sizes the job handle
            return self.world

        def _make_submission_file_text(self, command: str, uid: str) -> str:
            text = super()._make_submission_file_text(command, uid)
            if self.no_time_limit:  # submitit always writes one; drop it for the partition default
                text = "\n".join(l for l in text.split("\n") if not l.startswith("#SBATCH --time="))
            return text

    return Executor


def slurm_executor(folder, world: int, no_time_limit: bool, **kwargs):
    """A Slurm executor for `world` tasks; kwargs go to SlurmExecutor (max_num_timeout, python).
    Raises RuntimeError (submitit's) when srun is not on PATH."""
    return slurm_executor_class()(folder, world, no_time_limit, **kwargs)


# ------------------------------------------------------------------------- local executor
@contextlib.contextmanager
def own_session():
    """While active, LocalExecutor starts its controller in a new session, so a Ctrl-C at the
    terminal reaches only the submitting process. submitit has no option for it: its module's
    `subprocess` is swapped for one whose Popen passes start_new_session=True."""
    from submitit.local import local as local_module

    real = local_module.subprocess
    local_module.subprocess = types.SimpleNamespace(
        Popen=functools.partial(real.Popen, start_new_session=True))
    try:
        yield
    finally:
        local_module.subprocess = real


# ------------------------------------------------------------------------- job files and handles
def job_paths(folder: Path, job_id: str, task: int):
    """submitit's file names for one task: .stdout, .stderr, .result_pickle."""
    from submitit.core.utils import JobPaths

    return JobPaths(folder, job_id, task)


def result_outcome(path: Path) -> str:
    """"success" or "error" from a task's result pickle. Raises OSError, EOFError, IndexError or
    TypeError while it is missing or half written."""
    from submitit.core.utils import pickle_load

    return pickle_load(path)[0]  # submitit writes (outcome, value)


def slurm_job(folder: Path, job_id: str, world: int):
    """submitit's handle on a Slurm job submitted earlier, with all `world` tasks."""
    from submitit import SlurmJob

    return SlurmJob(folder, job_id, tasks=tuple(range(world)))
