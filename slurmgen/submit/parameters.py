"""A JobSpec as the submit path's parameters: what submitit and Slurm are asked for, the task each
GPU runs, and what the submit path refuses before submitting."""

from __future__ import annotations

import math
import os
import socket
from pathlib import Path
from typing import Optional

from slurmgen.plan import sweep
from slurmgen.plan.launch import container_args, rank_exports
from slurmgen.plan.passthrough import split_sbatch
from slurmgen.plan.spec import DEFAULT_LOG_NAME, JobSpec
from slurmgen.plan.words import SpecError
from slurmgen.submit.task import TrainTask, output_dir_arg


# submitit always writes #SBATCH --time; without a user limit that line is dropped, and this
# long "limit" keeps submitit from counting a preemption as a time-out.
NO_LIMIT_MINUTES = 365 * 24 * 60


def check_submittable(spec: JobSpec, command: str = "python -m slurmgen.submit") -> None:
    """What `render` accepts but submit cannot do. Raises SpecError (one line) naming ``command``,
    the submit command as the user typed it. The command line does not offer most of these options;
    a spec from spec_from_args or from Python may hold them all."""
    if len(set(spec.gpu_types)) > 1:
        raise SpecError(f"--gpu-type {','.join(spec.gpu_type)!r}: {command} asks for one kind of"
                        " GPU (one job, one task per GPU); give one type, or use slurmgen render (a het job)")
    for option, value, each in (("--partition", spec.partition, spec.partitions),
                                ("--constraint", spec.constraint, spec.constraints)):
        if len(set(each)) > 1:
            raise SpecError(f"{option} {value!r}: {command} submits one job, not one component per group of nodes;"
                            f" give one {option[2:]} for all nodes, or use slurmgen render (a het job)")
    if spec.launcher == "accelerate":
        raise SpecError(f"--launcher accelerate: {command} starts one task per GPU"
                        " itself; drop --launcher (accelerate is for scripts from slurmgen render)")
    if spec.launcher_args:
        raise SpecError(f"--launcher-arg {spec.launcher_args[0]!r}: {command} starts"
                        " no launcher (one task per GPU); use --srun-arg for srun's own options")
    if spec.cpus_per_node is not None:
        raise SpecError(f"--cpus-per-node {spec.cpus_per_node}: {command} starts one"
                        " task per GPU; use --cpus-per-gpu")
    if spec.spares:
        raise SpecError(f"--spares {spec.spares}: {command} keeps no spare nodes (its retries"
                        " submit again); use slurmgen render")
    if spec.slow_nodes.straggler_action != "warn":
        raise SpecError(f"--straggler-action {spec.slow_nodes.straggler_action}: {command} watches for"
                        " hangs, not stragglers, and runs no network check; use slurmgen render")
    if spec.prep:
        raise SpecError(f"--prep: not on {command} yet; use slurmgen render")
    if spec.log_name != DEFAULT_LOG_NAME:
        raise SpecError(f"--log-name {spec.log_name!r}: {command} writes submitit's"
                        " logs (FOLDER/JOBID_TASK_log.out and .err); choose the folder with --folder")


def world_size(spec: JobSpec) -> int:
    return sum(spec.gpus)


def time_minutes(spec: JobSpec) -> Optional[int]:
    """The time limit in whole minutes (submitit's unit), None without a limit."""
    seconds = spec.time_seconds
    return None if seconds is None else max(1, math.ceil(seconds / 60))


def slurm_parameters(spec: JobSpec, folder: Optional[Path] = None, dependency: str = "") -> dict:
    """SlurmExecutor.update_parameters() arguments for one task per GPU. ``folder`` (submitit's,
    where the stop file is) is mounted into a container, with the working directory;
    ``dependency`` is sbatch's, with --after's conditions added."""
    minutes = time_minutes(spec)
    types = sorted(set(spec.gpu_types) - {""})
    extra = {"ntasks": world_size(spec), "gpus_per_task": f"{types[0]}:1" if types else 1}
    dependency = sweep.dependency(spec.after, dependency)
    if dependency:
        extra["dependency"] = dependency
    if minutes is not None:
        extra["time"] = spec.time  # exactly as given, seconds included
    flags = dict(hint=spec.hint, threads_per_core=spec.threads_per_core, reservation=spec.reservation,
                 mail_type=spec.mail_type, mail_user=spec.mail_user,
                 wait_all_nodes=1 if spec.wait_all_nodes else None)
    extra.update({k: v for k, v in flags.items() if v is not None})
    # --sbatch NAME (a flag) or NAME=VALUE, as submitit writes them
    extra.update({name.replace("-", "_"): True if value is None else value
                  for name, value in map(split_sbatch, spec.sbatch)})
    params = dict(
        job_name=spec.job_name,
        nodes=spec.nodes,
        cpus_per_task=spec.cpus_per_gpu,
        time=minutes or NO_LIMIT_MINUTES,
        signal_delay_s=spec.grace,
        additional_parameters=extra,
        # Slurm 22.05 srun ignores SLURM_CPUS_PER_TASK; kill-on-bad-exit ends the step when one
        # rank fails instead of leaving the others in a collective until it times out.
        # --gpu-bind=none: every task sees its node's GPUs (task.node_gpus_visible).
        srun_args=[f"--cpus-per-task={spec.cpus_per_gpu}", "--kill-on-bad-exit=1", "--gpu-bind=none",
                   *container_args(spec, os.getcwd(), str(folder) if folder else None), *spec.srun_args],
    )
    optional = dict(partition=spec.partitions[0] or None, account=spec.account, qos=spec.qos, mem=spec.mem,
                    mem_per_gpu=spec.mem_per_gpu, mem_per_cpu=spec.mem_per_cpu,
                    constraint=spec.constraints[0] or None, exclude=spec.exclude,  # one for all (check_submittable)
                    nodelist=",".join(spec.nodelist) or None, exclusive=spec.exclusive or None,
                    setup=list(spec.setup) or None)
    params.update({k: v for k, v in optional.items() if v is not None})
    return params


def rank_environment(spec: JobSpec) -> tuple:
    """(KEY, VALUE) pairs for every rank: those slurmgen's own options imply (--offline,
    --hf-home, --nccl-*; the same as in rendered scripts), then the user's --env, which wins."""
    return tuple(rank_exports(spec)) + tuple(spec.env)


def local_parameters(spec: JobSpec) -> dict:
    """LocalExecutor parameters: every rank on this machine, one GPU index each."""
    world = world_size(spec)
    params = dict(tasks_per_node=world, gpus_per_node=world, signal_delay_s=spec.grace,
                  timeout_min=time_minutes(spec) or NO_LIMIT_MINUTES)
    if spec.setup:
        params["setup"] = list(spec.setup)
    return params


def make_task(spec: JobSpec, local: bool = False) -> TrainTask:
    port = spec.master_port
    if local and port is None:
        port = free_port()
    return TrainTask(target=spec.target, train_args=tuple(spec.train_args), env=rank_environment(spec),
                     master_port=port, collective_timeout=spec.collective_timeout,
                     grace=spec.grace, threads=spec.cpus_per_gpu, port_range=tuple(spec.port_range),
                     master_ip=spec.master_addr_ip, rank_hooks=spec.rank_hooks_on,
                     code=spec.code.log_line() if spec.code else "")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def resolve_output_dir(train_args, cwd: Optional[str] = None) -> Optional[Path]:
    """Where training writes metrics.json and progress.jsonl: its --output_dir, taken relative
    to the submitting directory (the job's working directory). None if not given."""
    value = output_dir_arg(train_args)
    if not value:
        return None
    return Path(cwd or os.getcwd(), os.path.expanduser(value)).resolve()
