"""The job options, defined once and shared by `slurmgen render`, `check` and `python -m slurmgen.submit`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

import click
import cloup

from slurmgen.plan import sweep
from slurmgen.site import auto_request
from slurmgen.plan.spec import CONTAINER_RUNTIMES, DEFAULT_MODULE, LAUNCHERS, JobSpec
from slurmgen.plan.slow_nodes import STRAGGLER_ACTIONS, SlowNodes
from slurmgen.plan.words import SpecError, parse_env, parse_gpus, parse_port_range

# (param decls, click keyword arguments); the order here is the order in --help.
JOB_OPTIONS = [
    (("--nodes", "-N"), dict(type=int, default=None, help="Number of nodes  [default: 1; with --gpus auto: as few as fit].")),
    (("--gpus", "-G"), dict(default="1", show_default=True, metavar="G[,G...]|auto",
                            help="GPUs per node: one count for all nodes, or one per node (1,1,2,2); auto: from the GPUs free now (with --world-size or --max-gpus).")),
    (("--gpu-type",), dict(default=None, metavar="T[,T...]",
                           help="Typed GRES, --gres=gpu:T:N: one GPU type for all nodes, or one per node like --gpus (a100,a100,h100,h100); nodes of one count and type make one component.")),
    (("--world-size",), dict(type=int, default=None, help="With --gpus auto: use exactly this many GPUs.")),
    (("--max-gpus",), dict(type=int, default=None, help="With --gpus auto: as many GPUs as are free now, up to this.")),
    (("--min-gpus",), dict(type=int, default=None, help="With --gpus auto and --max-gpus: at least this many, or refuse.")),
    (("--job-name", "-J"), dict(default="slurmgen", show_default=True, help="Slurm job name.")),
    (("--partition", "-p"), dict(default=None, help="Slurm partition.")),
    (("--account", "-A"), dict(default=None, help="Slurm account to charge.")),
    (("--qos",), dict(default=None, help="Slurm quality of service.")),
    (("--time", "-t"), dict(default=None, help="Time limit: MINUTES, HH:MM:SS or D-HH:MM:SS.")),
    (("--cpus-per-gpu",), dict(type=int, default=4, show_default=True, help="CPU cores per GPU.")),
    (("--cpus-per-node",), dict(type=int, default=None, metavar="N",
                                help="CPU cores per node instead of per GPU (torchrun, accelerate: one agent per node).")),
    (("--mem",), dict(default=None, help="Memory per node, e.g. 64G (0 = all of it).")),
    (("--mem-per-gpu",), dict(default=None, metavar="SIZE",
                              help="Memory per GPU: a node gets SIZE times its GPU count.")),
    (("--mem-per-cpu",), dict(default=None, metavar="SIZE", help="Memory per CPU core.")),
    (("--constraint", "-C"), dict(default=None, help="Node features required (Slurm --constraint).")),
    (("--gpu-mem",), dict(default=None, metavar="SIZE",
                          help="GPU memory (80G; or one per node like --gpus) for `slurmgen fit` and --check.")),
    (("--nodelist", "-w"), dict(default=None, metavar="HOSTLIST",
                                help="Exact hosts, one per node in --gpus order, e.g. node[1-4].")),
    (("--exclude", "-x"), dict(default=None, metavar="HOSTLIST", help="Hosts never to use.")),
    (("--exclusive",), dict(is_flag=True, default=False,
                            help="Whole nodes: no other job, and no two components of this one, on a node.")),
    (("--hint",), dict(default=None, metavar="HINT",
                       help="Slurm task placement hint: nomultithread, multithread, compute_bound, memory_bound.")),
    (("--threads-per-core",), dict(type=int, default=None, metavar="N",
                                   help="Hardware threads per core to use (1 = no hyper-threads).")),
    (("--reservation",), dict(default=None, help="Slurm reservation to run in.")),
    (("--wait-all-nodes",), dict(is_flag=True, default=False,
                                 help="Start only when every node is booted and ready.")),
    (("--mail-type",), dict(default=None, metavar="TYPE[,TYPE]", help="Mail on BEGIN, END, FAIL, ALL, ...")),
    (("--mail-user",), dict(default=None, metavar="ADDRESS", help="Who gets the mail.")),
    (("--log-dir",), dict(default="logs", show_default=True,
                          help="Directory for the job log; created now, since Slurm opens the log before the job starts.")),
    (("--log-name",), dict(default="%x-%j.out", show_default=True, metavar="PATTERN",
                           help="Job log file name in --log-dir; Slurm's %x (job name), %j (job id), %N (node) ...")),
    (("--error-log",), dict(is_flag=True, default=False,
                            help="Write stderr to its own file beside the log (the log name with .err).")),
    (("--env", "-e"), dict(multiple=True, metavar="KEY=VALUE", help="Environment variable for every rank (repeatable).")),
    (("--setup",), dict(multiple=True, metavar="LINE",
                        help="Shell line run before launching, e.g. 'module load cuda' (repeatable).")),
    (("--setup-file",), dict(default=None, type=click.Path(dir_okay=False),
                             help="File of setup lines, run before launching.")),
    (("--launcher",), dict(type=click.Choice(LAUNCHERS), default="torchrun", show_default=True,
                           help="How ranks start: torchrun agent per node, srun task per GPU, or accelerate (uniform layouts only).")),
    (("--module", "-m"), dict(default=DEFAULT_MODULE, show_default=True, help="Python module to train with.")),
    (("--script",), dict(default=None, help="A Python script to run instead of --module.")),
    (("--exec",), dict(default=None, metavar="PROGRAM",
                       help="A program that is not Python, run per rank (e.g. a framework's console script).")),
    (("--python",), dict(default="python3", show_default=True, help="Python on the compute nodes; it runs every step (torchrun and accelerate as -m).")),
    (("--master-port",), dict(type=int, default=None, help="Rendezvous port [default: derived from the job id]." )),
    (("--master-addr-ip",), dict(is_flag=True, default=False,
                                 help="Give ranks rank 0's IPv4 address, not its host name (of the --nccl-socket-ifname interface if one is named).")),
    (("--port-range",), dict(default="20000-29999", show_default=True, help="Range for the derived port.")),
    (("--grace",), dict(type=int, default=180, show_default=True,
                        help="Seconds before the time limit at which ranks checkpoint and the job requeues.")),
    (("--max-restarts",), dict(type=int, default=3, show_default=True,
                               help="How often a job stopped at its time limit is requeued.")),
    (("--rdzv-timeout",), dict(type=int, default=300, show_default=True, help="Seconds to wait for every node to join.")),
    (("--collective-timeout",), dict(type=int, default=600, show_default=True,
                                     help="Seconds a collective may hang before the job fails.")),
    (("--hang-timeout",), dict(type=int, default=300, show_default=True, metavar="SECONDS",
                               help="Seconds without a step on some rank before the job counts as hung: the stacks of every rank go to hang-report-JOBID.txt and the job is retried (0: off).")),
    (("--save-timeout",), dict(type=int, default=None, metavar="SECONDS",
                               help="Seconds a checkpoint save may take before it counts as hung [default: three times the longest save so far, at least 600].")),
    (("--max-failures",), dict(type=int, default=2, show_default=True,
                               help="How often a job that hung or crashed is retried from its newest checkpoint; a node blamed twice (or marked down) is excluded.")),
    (("--spares",), dict(type=int, default=0, show_default=True, metavar="N",
                         help="Idle nodes kept in the allocation: one replaces a node that is lost or blamed, and training resumes from the newest checkpoint without a requeue (rendered scripts).")),
    (("--rank-hooks/--no-rank-hooks",), dict(default=True, show_default=True,
                                             help="Your own --script or --module gets what the train.* entry points have: a beat at every optimizer step (hang watch, retries), stacks on a hang; a Hugging Face Trainer also progress.jsonl and a checkpoint at the time-limit warning.")),
    (("--resume",), dict(type=click.Choice(["auto", "off"]), default="off", show_default=True,
                         help="auto: a Trainer in your own script resumes from the newest complete checkpoint in its output_dir, as if it passed resume_from_checkpoint.")),
    (("--preflight/--no-preflight",), dict(default=True, show_default=True,
                                           help="Compare every node's software before training.")),
    (("--net-check/--no-net-check",), dict(default=True, show_default=True,
                                           help="Time every node's links before training (multi-node jobs); a slow node is left out and the job requeued (or a spare takes its place).")),
    (("--net-check-ratio",), dict(type=float, default=0.5, show_default=True, metavar="RATIO",
                                  help="A node below this share of the median node's bandwidth is slow.")),
    (("--net-min-gbps",), dict(type=float, default=0.0, show_default=True, metavar="GBPS",
                               help="A node below this many GB/s is slow whatever the others do (0: no floor; a profile's to set).")),
    (("--straggler-ratio",), dict(type=float, default=2.0, show_default=True, metavar="RATIO",
                                  help="A rank whose compute time per step is this many times the median rank's is named a straggler (0: off).")),
    (("--straggler-window",), dict(type=int, default=50, show_default=True, metavar="STEPS",
                                   help="Steps a rank's compute time is averaged over.")),
    (("--straggler-action",), dict(type=click.Choice(list(STRAGGLER_ACTIONS)), default="warn", show_default=True,
                                   help="warn: name it in the job log and `slurmgen watch`; exclude: also checkpoint and go on without its node (a spare, or a requeue).")),
    (("--nccl-debug",), dict(default=None, metavar="LEVEL", help="NCCL_DEBUG for every rank (WARN, INFO, ...).")),
    (("--nccl-socket-ifname",), dict(default=None, metavar="IFACES",
                                     help="Network interfaces for NCCL and gloo in NCCL's terms: ib (prefixes; gloo gets the node's matching interface), =ib0 (exact), ^docker,lo (avoid; NCCL only).")),
    (("--hf-home",), dict(default=None, metavar="DIR",
                          help="Shared Hugging Face cache that every node reads (HF_HOME).")),
    (("--offline",), dict(is_flag=True, default=False,
                          help="Compute nodes never touch the hub: models and data are fetched into --hf-home now, on this node.")),
    (("--container",), dict(default=None, metavar="RUNTIME:IMAGE",
                            help="Every step in an image: apptainer:IMAGE.sif or singularity:IMAGE.sif (apptainer exec --nv, the job's directories bound), pyxis:IMAGE (as --container-image).")),
    (("--container-image",), dict(default=None, help="pyxis/enroot image for every step.")),
    (("--container-mounts",), dict(default=None, help="pyxis/enroot mounts, SRC:DST[,SRC:DST...].")),
    (("--slurm-version",), dict(default=None, metavar="X.Y",
                                help="Slurm release the job is for, e.g. 25.11 [default: that of the sbatch installed here].")),
    (("--sweep",), dict(multiple=True, metavar="KEY=V1,V2",
                        help="Run once per value of training argument --KEY (repeatable: every combination); each run writes to --output_dir/NAME.")),
    (("--sweep-mode",), dict(type=click.Choice(list(sweep.MODES)), default="product", show_default=True,
                             help="product: every combination of the --sweep values; zip: the first values together, then the second...")),
    (("--max-parallel",), dict(type=int, default=None, metavar="N", help="Runs of a sweep at once [default: all].")),
    (("--after",), dict(multiple=True, metavar="JOB[:ok|any]",
                        help="Start after job JOB succeeded (ok, the default) or ended (any) (repeatable).")),
    (("--prep",), dict(is_flag=True, default=False,
                       help="Prepare (tokenize) the data once in a CPU-only job first; training waits for it and never tokenizes (train.sft).")),
    (("--sbatch",), dict(multiple=True, metavar="NAME[=VALUE]",
                         help="Any other sbatch long option, without dashes: --sbatch overcommit (repeatable).")),
    (("--srun-arg",), dict(multiple=True, metavar="ARG",
                           help="Added to every training srun, e.g. --srun-arg=--cpu-bind=cores (repeatable).")),
    (("--launcher-arg",), dict(multiple=True, metavar="ARG",
                               help="Added to torchrun or accelerate, e.g. --launcher-arg=--tee=3 (repeatable).")),
]


def _apply_profile(ctx: click.Context, _param, name):
    """Eager: fill click's default_map from the profile before any other option is read."""
    from slurmgen.plan import profiles

    multiple = {p.name: getattr(p, "multiple", False) for p in ctx.command.params
                if isinstance(p, click.Option) and p.name in option_names()}
    try:
        values, path = profiles.load(name, multiple)
    except SpecError as err:
        raise click.UsageError(str(err)) from None
    ctx.default_map = {**(ctx.default_map or {}), **values}
    ctx.meta["slurmgen.profile"] = (name or "default", path) if values or name else None
    return name


# --help's sections, in order: every job option in exactly one (checked below).
SECTIONS = [
    ("Layout", ["nodes", "gpus", "gpu_type", "world_size", "max_gpus", "min_gpus", "nodelist", "exclude",
                "exclusive"]),
    ("Resources", ["partition", "account", "qos", "time", "cpus_per_gpu", "cpus_per_node", "mem", "mem_per_gpu",
                   "mem_per_cpu", "gpu_mem", "constraint", "hint", "threads_per_core", "reservation",
                   "wait_all_nodes"]),
    ("Launch", ["launcher", "module", "script", "exec", "python", "env", "setup", "setup_file", "prep",
                "master_port", "master_addr_ip", "port_range", "nccl_debug", "nccl_socket_ifname", "hf_home",
                "offline", "rank_hooks", "launcher_arg", "srun_arg"]),
    ("Fault tolerance", ["grace", "max_restarts", "max_failures", "spares", "hang_timeout", "save_timeout", "resume",
                         "preflight", "rdzv_timeout", "collective_timeout"]),
    ("Slow nodes", ["net_check", "net_check_ratio", "net_min_gbps", "straggler_ratio", "straggler_window",
                    "straggler_action"]),
    ("Sweeps and dependencies", ["sweep", "sweep_mode", "max_parallel", "after"]),
    ("Site and containers", ["container", "container_image", "container_mounts", "slurm_version", "sbatch"]),
    ("Output", ["job_name", "log_dir", "log_name", "error_log", "mail_type", "mail_user"]),
]


def _name(decls) -> str:
    return decls[0].lstrip("-").split("/")[0].replace("-", "_")


def job_options(func):
    """Decorate a click command with every job option, in --help's sections, then the training
    arguments after --."""
    func = click.argument("train_args", nargs=-1, type=click.UNPROCESSED)(func)
    by_name = {_name(decls): (decls, kwargs) for decls, kwargs in JOB_OPTIONS}
    profile = click.option("--profile", default=None, is_eager=True, expose_value=False, callback=_apply_profile,
                           help="Profile (table) in slurmgen.toml; [default] applies without it.")
    for title, names in reversed(SECTIONS):
        options = [click.option(*by_name[n][0], **by_name[n][1]) for n in names]
        func = cloup.option_group(title, *options, *([profile] if title == "Site and containers" else []))(func)
    return func


def describe_settings(ctx: click.Context, params: dict) -> str:
    """Effective job settings and where each came from (command line, profile, default)."""
    from click.core import ParameterSource

    profile = ctx.meta.get("slurmgen.profile")
    origin = {ParameterSource.COMMANDLINE: "command line", ParameterSource.ENVIRONMENT: "environment",
              ParameterSource.DEFAULT: "default", ParameterSource.DEFAULT_MAP:
              f"profile [{profile[0]}] in {profile[1]}" if profile else "profile"}
    lines = []
    for name in option_names():
        value = params.get(name)
        if isinstance(value, tuple):
            value = list(value)
        source = origin.get(ctx.get_parameter_source(name), "default")
        lines.append(f"{name.replace('_', '-'):<20} = {value!r:<30} # {source}")
    return "\n".join(lines)


def option_names() -> list[str]:
    """Parameter names of the job options (as click passes them)."""
    return [_name(decls) for decls, _ in JOB_OPTIONS]


def _read_setup_file(path: str) -> list[str]:
    try:
        text = Path(path).read_text()
    except OSError as err:
        raise SpecError(f"--setup-file {path!r}: {err.strerror}") from None
    return [line for line in text.splitlines() if line.strip()]


def container_choice(container: Optional[str], image: Optional[str]) -> dict:
    """--container RUNTIME:IMAGE, or --container-image IMAGE (pyxis), as spec fields."""
    if container is None:
        return {"container_image": image}
    if image is not None:
        raise SpecError(f"--container {container!r} and --container-image {image!r}: give one of them")
    runtime, _, path = container.partition(":")
    if runtime not in CONTAINER_RUNTIMES or not path:
        raise SpecError(f"--container {container!r}: give RUNTIME:IMAGE with RUNTIME one of"
                        f" {', '.join(CONTAINER_RUNTIMES)}, e.g. apptainer:/images/train.sif")
    return {"container_image": path, "container_runtime": runtime}


def installed_release() -> Optional[str]:
    """The installed sbatch's release ("22.05"), asked once here, at the edge: the plan asks nothing."""
    from slurmgen.site import slurm_release

    found = slurm_release.installed()
    return slurm_release.name(found) if found else None


def spec_from_options(params: dict) -> JobSpec:
    """click parameters -> validated JobSpec. Raises SpecError with one user-facing line."""
    nodelist_text, origin = params.get("nodelist"), ""
    if params["gpus"].strip().lower() == "auto":
        gpus, nodelist_text, origin = auto_request.auto_layout_choice(params)
    else:
        auto_request.refuse_auto_only(params)
        gpus = parse_gpus(params["gpus"], 1 if params["nodes"] is None else params["nodes"])
    setup = list(params["setup"])
    if params.get("setup_file"):
        setup += _read_setup_file(params["setup_file"])
    nodelist = ()
    if nodelist_text:
        import hostlist  # python-hostlist; expands node[1-4]

        try:
            nodelist = tuple(hostlist.expand_hostlist(nodelist_text))
        except hostlist.BadHostlist as err:
            raise SpecError(f"--nodelist {nodelist_text!r}: {err}") from None
    script = params.get("script")
    if script is not None and not os.path.isfile(script):
        raise SpecError(f"--script {script!r}: no such file")
    spec = JobSpec(
        gpus=gpus,
        layout_origin=origin,
        job_name=params["job_name"],
        partition=params["partition"],
        account=params["account"],
        qos=params["qos"],
        time=params["time"],
        cpus_per_gpu=params["cpus_per_gpu"],
        mem=params["mem"],
        constraint=params["constraint"],
        gpu_mem=params["gpu_mem"],
        gpu_type=tuple(params["gpu_type"].split(",")) if params["gpu_type"] is not None else (),
        nodelist=nodelist,
        exclude=params["exclude"],
        exclusive=params["exclusive"],
        log_dir=os.path.abspath(params["log_dir"]),
        env=parse_env(params["env"]),
        setup=tuple(setup),
        master_port=params["master_port"],
        port_range=parse_port_range(params["port_range"]),
        launcher=params["launcher"],
        module=params["module"],
        script=os.path.abspath(script) if script else None,
        train_args=tuple(params["train_args"]),
        python=params["python"],
        grace=params["grace"],
        max_restarts=params["max_restarts"],
        rdzv_timeout=params["rdzv_timeout"],
        collective_timeout=params["collective_timeout"],
        hang_timeout=params["hang_timeout"],
        save_timeout=params["save_timeout"],
        max_failures=params["max_failures"],
        spares=params["spares"],
        preflight=params["preflight"],
        slow_nodes=SlowNodes(**{name: params[name] for name in SlowNodes.__dataclass_fields__}),
        rank_hooks=params["rank_hooks"],
        resume=params["resume"],
        nccl_debug=params["nccl_debug"],
        nccl_socket_ifname=params["nccl_socket_ifname"],
        hf_home=os.path.abspath(params["hf_home"]) if params["hf_home"] else None,
        offline=params["offline"],
        **container_choice(params["container"], params["container_image"]),
        container_mounts=params["container_mounts"],
        mem_per_gpu=params["mem_per_gpu"],
        mem_per_cpu=params["mem_per_cpu"],
        cpus_per_node=params["cpus_per_node"],
        reservation=params["reservation"],
        mail_type=params["mail_type"],
        mail_user=params["mail_user"],
        hint=params["hint"],
        threads_per_core=params["threads_per_core"],
        wait_all_nodes=params["wait_all_nodes"],
        error_log=params["error_log"],
        log_name=params["log_name"],
        sbatch=tuple(params["sbatch"]),
        srun_args=tuple(params["srun_arg"]),
        launcher_args=tuple(params["launcher_arg"]),
        exec=params["exec"],
        master_addr_ip=params["master_addr_ip"],
        slurm_version=params["slurm_version"] or (installed_release() if params["sbatch"] else None),
        sweep=sweep.parse(params["sweep"], params["sweep_mode"]),
        sweep_mode=params["sweep_mode"],
        max_parallel=params["max_parallel"],
        after=sweep.parse_after(params["after"]),
        prep=params["prep"],
    )
    return spec.validate()
