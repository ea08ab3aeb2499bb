"""What runs in each task of a submitted job: one task per GPU, one rank per task.

submitit pickles a `TrainTask` (by reference to this module), starts one Python process per
Slurm task (or per local process) and calls it there. The task works out its rank with the
project's own helper (train.distenv: submitit's own helper gets uneven nodes wrong), exports
RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR... and runs the training entry point in-process.

Nothing heavy is imported at module level: the submitting side imports this module too, and
slurmgen must stay free of torch until a task actually trains.
"""

from __future__ import annotations

import atexit
import importlib
import importlib.util
import logging
import os
import signal
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import MutableMapping, Optional

from slurmgen.contract import COLLECTIVE_TIMEOUT_ENV, HEARTBEAT_DIR_ENV, STOP_FILE_ENV, STOP_WAIT_ENV
from slurmgen.job.record import HANG_CANCEL, JobFiles
from slurmgen.job.rendezvous import job_port, node_iface
from slurmgen.plan.launch import iface_prefixes
from slurmgen.plan.spec import SHIPPED_MODULES
from slurmgen.plan.words import train_arg
from slurmgen.submit.submitit_adapter import (EXECUTOR_ENV, FOLDER_ENV, LOCAL_ENV, LOCAL_EXECUTOR,
                                       preempt_signal)

# Rank variables a task may inherit from the submitting shell (say, a torchrun worker or an
# salloc shell); they describe that process, not this job, so they are cleared first.
RANK_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR",
             "MASTER_PORT", "TORCHELASTIC_RUN_ID")
# First line of every task's stdout; the submitting side reads it to name a failing task.
START_MARK = "slurmgen-task:"
LOCAL_MASTER_ADDR = "127.0.0.1"


class TrainingFailed(RuntimeError):
    """The entry point exited with a non-zero status (its own message is already on stderr)."""


def local_rank_env(env: MutableMapping[str, str], master_port: int) -> None:
    """Rank variables for submitit's LocalExecutor, which sets only SUBMITIT_LOCAL_* ones.

    All processes are on this machine: world size = local world size, master 127.0.0.1.
    """
    ntasks = env.get(LOCAL_ENV["num_tasks"], "1")
    env.update(RANK=env.get(LOCAL_ENV["global_rank"], "0"),
               LOCAL_RANK=env.get(LOCAL_ENV["local_rank"], "0"),
               WORLD_SIZE=ntasks, LOCAL_WORLD_SIZE=ntasks, GROUP_RANK="0",
               MASTER_ADDR=LOCAL_MASTER_ADDR, MASTER_PORT=str(master_port))


def prepare_environ(env: MutableMapping[str, str], pairs, master_port: Optional[int],
                    collective_timeout: Optional[int], threads: Optional[int] = None,
                    port_range: tuple = (20000, 29999)) -> None:
    """Everything a task sets before the rank helper reads the environment (pure on `env`)."""
    for name in RANK_VARS:
        env.pop(name, None)
    env.update(dict(pairs))
    # As the rendered scripts do: one OpenMP pool per rank, sized to its CPUs, whatever the login
    # shell had; only the user's own --env OMP_NUM_THREADS says otherwise.
    if threads and "OMP_NUM_THREADS" not in dict(pairs):
        env["OMP_NUM_THREADS"] = str(threads)
    if collective_timeout:
        env.setdefault(COLLECTIVE_TIMEOUT_ENV, str(collective_timeout))
    prefixes = iface_prefixes(env.get("NCCL_SOCKET_IFNAME", ""))
    if prefixes and "GLOO_SOCKET_IFNAME" not in env:  # gloo needs this node's exact name
        found = node_iface(prefixes)
        if found:
            env["GLOO_SOCKET_IFNAME"] = found
    if env.get(EXECUTOR_ENV) == LOCAL_EXECUTOR:
        local_rank_env(env, master_port or 29500)
    else:  # a requeued job keeps its id, hence its port
        env["MASTER_PORT"] = str(master_port or job_port(job_id_of(env), port_range))
        node_gpus_visible(env)
        if env.get(FOLDER_ENV):  # where `python -m slurmgen.submit` watches for hangs
            env.setdefault(HEARTBEAT_DIR_ENV, heartbeat_dir(env[FOLDER_ENV], job_id_of(env)))




def heartbeat_dir(folder, job_id: str) -> str:
    """Where a submitted job's ranks beat: its folder in the submitit folder (shared, like the logs)."""
    return str(JobFiles.of(folder, job_id).beats)


def node_gpus_visible(env: MutableMapping[str, str]) -> None:
    """Every task sees all of the job's GPUs on its node, and uses its own by local rank.

    The step runs with --gpu-bind=none: per-task binding gave each task one GPU, hid the peers
    from NCCL (no P2P/NVLink) and, with ConstrainDevices, denied them. Without binding Slurm
    leaves CUDA_VISIBLE_DEVICES unset where a node holds several of the job's GPUs; the device
    cgroup then shows CUDA just those, numbered 0..n-1, which this says explicitly."""
    gpus = env.get("SLURM_GPUS_ON_NODE", "")
    if "CUDA_VISIBLE_DEVICES" not in env and gpus.isdigit() and int(gpus) > 0:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(int(gpus)))


def cancelled_file(folder, job_id: str) -> Path:
    """Written by the submitting side's hang watch before it cancels the job: the tasks then
    stop without requeueing it (scancel's TERM would otherwise reach the SIGTERM stop path,
    which requeues), so the hang counts as a failure and is retried there."""
    return JobFiles.of(folder, job_id).cancelled


def cancelled_by_slurm(job: str, files: Optional[JobFiles] = None) -> bool:
    """Whether the job was cancelled (scancel, the user's or an administrator's final word, whose TERM
    the ranks would take as a preemption's): Slurm says CANCELLED, or COMPLETING ended before its
    limit, or `slurmgen cancel` marked it in the job's folder (slurmgen.job.slurm.job_info)."""
    from slurmgen.job.slurm import JobInfo, job_info, marked

    return (job_info(job, files) if job else marked(JobInfo(), files)).cancelled


def job_id_of(env) -> str:
    return env.get("SLURM_JOB_ID") or env.get(LOCAL_ENV["job_id"]) or str(os.getpid())


def output_dir_arg(args) -> Optional[str]:
    """The value of --output_dir (or --output-dir) in training arguments, if given."""
    return train_arg(args, "--output_dir", "--output-dir")


class _StopOnSignal:
    """Time-limit / preemption warning (USR2): save a checkpoint first, then requeue.

    submitit's own handler checkpoints and requeues at once, killing rank 0 mid-step, so the
    run would resume from its last periodic checkpoint. Instead rank 0 writes the stop file the
    entry points poll every step: all ranks stop together after saving a complete checkpoint,
    and only then is submitit's handler called (checkpoint() + scontrol requeue). If training
    does not stop within half the grace period, submitit's handler runs anyway (alarm).
    """

    def __init__(self, stop_file: Path, is_main: bool, grace: int, cancelled: Optional[Path] = None):
        self.stop_file, self.is_main, self.grace = stop_file, is_main, grace
        self.cancelled = cancelled
        self.requested = False
        self.signum = preempt_signal()
        self.submitit_handler = signal.getsignal(self.signum)

    def install(self) -> None:
        if callable(self.submitit_handler):
            signal.signal(self.signum, self._on_signal)

    def _on_signal(self, signum, frame) -> None:
        self.requested = True
        print(f"{START_MARK} got {signal.Signals(signum).name}: checkpointing, then requeueing",
              file=sys.stderr, flush=True)
        if self.is_main:
            self.stop_file.touch()
            signal.signal(signal.SIGALRM, lambda *_: self._requeue(signum))
            signal.alarm(max(10, self.grace // 2))

    def _requeue(self, signum) -> None:
        """submitit's handler (checkpoint(), scontrol requeue, exit), unless the job was cancelled:
        after a hang this task then fails (a failure, retried by the submitting side); after the
        user's cancel (scancel, `slurmgen cancel`) it just stops."""
        files = JobFiles(self.cancelled.parent) if self.cancelled is not None else None
        if files is not None and files.cancel_mark() == HANG_CANCEL:
            _one_line_excepthook()
            raise TrainingFailed("the job was cancelled after a hang; not requeueing it")
        if cancelled_by_slurm(os.environ.get("SLURM_JOB_ID", ""), files):
            print(f"{START_MARK} the job was cancelled (scancel): stopped, not requeueing it",
                  file=sys.stderr, flush=True)
            return
        self.submitit_handler(signum, None)

    def finish(self, result) -> None:
        """After training returned: hand over to submitit (rank 0), or wait to be requeued.

        Also when the entry point stopped without USR2 (SIGTERM: preemption where the site sends
        no user signal). Not when it says it finished every step: the warning came after its last
        stop check, and requeueing would only rerun a finished job. Every rank has the same
        metrics; a user's script returns None and is requeued on USR2 as before."""
        stopped_early = result.get("stopped_early") if isinstance(result, dict) else None
        if not (self.requested or stopped_early is True):
            return
        signal.alarm(0)
        if stopped_early is False:
            print(f"{START_MARK} training finished before the warning could stop it; not requeueing",
                  file=sys.stderr, flush=True)
        elif not callable(self.submitit_handler):
            return  # no requeueing executor (local runs)
        elif self.is_main:
            self._requeue(self.signum)
        else:
            time.sleep(self.grace + 60)  # `scontrol requeue` ends this task first


def _release_process_group() -> None:
    """End the process group the entry point left open: torch's threads torn down at
    interpreter exit can abort the process ("terminate called without an active exception")
    after it has succeeded, and srun then fails the whole job."""
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def _leave_without_finalization() -> None:
    """Registered once a task has succeeded, to run after submitit has written its result: even
    after destroy_process_group, gloo's threads can still be releasing the last collective's
    tensors when Python finalizes, and a thread that then needs the GIL aborts the process
    (seen: a task that had logged "Job completed successfully", and srun failed the job). The
    rendered path leaves the same way (train.program.exit_after)."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def import_entry_point(name: str):
    """Import the training module: a shipped entry point (train.*) never from the working
    directory, where a user's train.py would shadow the package (the task process started with
    `python -m`, so that directory is first on sys.path); a user's own module as Python would."""
    if name not in SHIPPED_MODULES:
        return importlib.import_module(name)
    here, saved = os.getcwd(), list(sys.path)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p) != here]  # "" and "." too
    try:
        return importlib.import_module(name)
    finally:
        sys.path[:] = saved


def install_rank_hooks(environ: MutableMapping[str, str], kind: str) -> None:
    """What a rendered job's ranks get from train/rank_hooks on their PYTHONPATH: in this process
    for a script or module run here, through PYTHONPATH for a program (--exec) that runs Python."""
    from train import rank_hooks

    if kind == "exec":
        environ["PYTHONPATH"] = os.pathsep.join(p for p in (rank_hooks.DIR, environ.get("PYTHONPATH")) if p)
        return
    spec = importlib.util.spec_from_file_location("slurmgen_rank_hooks",
                                                  os.path.join(rank_hooks.DIR, "sitecustomize.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.install()


def _one_line_excepthook() -> None:
    previous = sys.excepthook  # torch may have put its own in place

    def hook(kind, value, tb):
        if issubclass(kind, TrainingFailed):
            print(f"{START_MARK} {value}", file=sys.stderr, flush=True)
        else:
            previous(kind, value, tb)

    sys.excepthook = hook


@dataclass(frozen=True)
class TrainTask:
    """The checkpointable callable submitit runs in every task. Returns the entry point's metrics."""

    target: tuple  # ("module", "train.sft"), ("script", "/abs/train.py") or ("exec", "program")
    train_args: tuple = ()
    env: tuple = ()  # (KEY, VALUE) pairs for every rank
    master_port: Optional[int] = None  # None: derived from the job id (Slurm), free port (local)
    collective_timeout: Optional[int] = None
    grace: int = 180
    threads: Optional[int] = None  # OMP_NUM_THREADS unless set: the CPUs per GPU
    port_range: tuple = (20000, 29999)  # for the port derived from the job id
    master_ip: bool = False  # --master-addr-ip: MASTER_ADDR as rank 0's IPv4 address
    rank_hooks: bool = False  # the user's own code gets train/rank_hooks (spec.rank_hooks_on)
    code: str = ""  # the code snapshot's line (slurmgen: code: ...), which rank 0 says in its log

    def __call__(self) -> Optional[dict]:
        environ = os.environ
        prepare_environ(environ, self.env, self.master_port, self.collective_timeout, self.threads,
                        self.port_range)
        environ.setdefault(STOP_WAIT_ENV, str(max(10, self.grace // 2)))  # as _StopOnSignal waits
        from train.distenv import DistEnv  # lazily: the submitting side never needs it

        denv = DistEnv.from_environ(environ)
        denv.export(environ)
        if self.master_ip:
            environ["MASTER_ADDR"] = socket.gethostbyname(environ["MASTER_ADDR"])
        node = environ.get("SLURMD_NODENAME") or socket.gethostname()  # Slurm's name, not the host's
        print(f"{START_MARK} task {denv.rank} on {node}: {denv.describe()}",
              flush=True)
        if self.code and denv.is_main:
            print(self.code, flush=True)
        folder = environ.get(FOLDER_ENV)
        stop = _StopOnSignal(self._stop_file(environ), denv.is_main, self.grace,
                             cancelled_file(folder, job_id_of(environ)) if folder else None)
        if denv.is_main:
            stop.stop_file.unlink(missing_ok=True)  # left over from the run before a requeue
        stop.install()
        if self.rank_hooks:
            install_rank_hooks(environ, self.target[0])
        result = self._run(stop)
        stop.finish(result)
        _release_process_group()
        if environ.get(EXECUTOR_ENV):  # a submitit job, not a call in-process
            atexit.register(_leave_without_finalization)
        return result

    def _stop_file(self, environ) -> Path:
        if environ.get(STOP_FILE_ENV):
            return Path(environ[STOP_FILE_ENV])
        files = JobFiles.of(environ.get(FOLDER_ENV) or ".", job_id_of(environ))
        files.folder.mkdir(parents=True, exist_ok=True)
        environ[STOP_FILE_ENV] = str(files.stop)
        return files.stop

    def _run(self, stop: _StopOnSignal) -> Optional[dict]:
        kind, name = self.target
        sys.argv = [name, *self.train_args]
        try:
            if kind == "exec":  # a program, not Python: its exit status is the outcome
                from slurmgen.job.script_end import program_status  # 0 once its rank ended its script

                try:
                    status = program_status([name, *self.train_args], os.environ)
                except OSError as err:
                    _one_line_excepthook()
                    raise TrainingFailed(f"--exec {name}: {err.strerror}") from None
                if status:
                    raise SystemExit(status)
                return None
            if kind == "script":
                import runpy

                runpy.run_path(name, run_name="__main__")
                return None
            return import_entry_point(name).main(list(self.train_args))
        except SystemExit as exit_:
            if stop.requested:
                raise  # submitit's handler requeued the job and is exiting
            if exit_.code not in (0, None):
                _one_line_excepthook()  # the entry point has printed why; a traceback adds nothing
                raise TrainingFailed(f"{name} exited with status {exit_.code}") from None
            return None

    def checkpoint(self, *args, **kwargs):
        """Called by submitit on USR2: resubmit the same task; the entry points resume by
        themselves from the newest complete checkpoint in their output directory."""
        from submitit.helpers import DelayedSubmission

        return DelayedSubmission(self, *args, **kwargs)
