"""What a JobSpec may hold: the values each option allows, and the checks that refuse the rest
with one line naming the value (SpecError), run once by JobSpec.validate."""

from __future__ import annotations

import os
import re
from typing import Optional

from slurmgen.plan import passthrough, sweep
from slurmgen.plan.code_snapshot import ceiling_bytes
from slurmgen.plan.words import SpecError, parse_sizes, parse_time, printable_line

LAUNCHERS = ("torchrun", "srun", "accelerate")
# --container RUNTIME:IMAGE; pyxis is what --container-image has always meant.
CONTAINER_RUNTIMES = ("apptainer", "singularity", "pyxis")
NCCL_DEBUG_LEVELS = ("VERSION", "WARN", "INFO", "TRACE")
DEFAULT_MODULE = "train.sft"
PREP_MODULE = "train.sft"  # --prep: the one entry point that prepares its data in a job of its own
# The entry points slurmgen ships (the `train` package). A `train.py` in the job's working
# directory (the seed's own file name) would shadow them, since `python -m` puts that directory
# first on sys.path: their jobs export PYTHONSAFEPATH=1 (Python 3.11+; on older Pythons preflight
# reports the target missing), and the submit path imports them without it (slurmgen.submit.task). A
# user's own --module and --script keep Python's rule.
SHIPPED_MODULES = ("train.sft", "train.classify", "train.ddp_loop")
DEFAULT_PORT_RANGE = (20000, 29999)
# The least --grace that holds the ranks' stop wait (plan.runtime.stop_wait: 5 s at least) and the
# requeue's STOP_MARGIN of 10 s before the time limit: less, and the job ends before it requeues.
MIN_GRACE = 15
HOST_NAME_MAX = 64  # Linux's HOST_NAME_MAX

# The patterns are text, compiled where first used (re keeps them): most renders use few of them,
# and compiling all of them at import cost ~1 ms (issue 43).
_MODULE = r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*\Z"
_GRES_TYPE = r"[A-Za-z0-9_.\-]+\Z"
_MEM = r"(?a)[0-9]{1,15}[KMGT]?\Z"  # 15 digits: any memory, and int() takes it
MAIL_TYPES = ("NONE", "BEGIN", "END", "FAIL", "REQUEUE", "ALL", "INVALID_DEPEND", "STAGE_OUT",
              "TIME_LIMIT", "TIME_LIMIT_90", "TIME_LIMIT_80", "TIME_LIMIT_50", "ARRAY_TASKS")
HINTS = ("compute_bound", "memory_bound", "multithread", "nomultithread")
DEFAULT_LOG_NAME = "%x-%j.out"
# Slurm's filename patterns (%j job id, %x job name, %N first node, ...), optionally zero-padded.
_LOG_NAME_PART = r"%(%|[0-9]*[AabJjNnstux])"
_MAIL_USER = r"[A-Za-z0-9_.+\-]+(@[A-Za-z0-9_.\-]+)?\Z"
# Names Slurm takes in #SBATCH lines (partition, account, qos, node lists, features).
_SLURM_WORD = r"[A-Za-z0-9_.,:\[\]\-+=@]+\Z"
_CONSTRAINT = r"[A-Za-z0-9_.,:\[\]\-+=@&|*()!]+\Z"
_IFNAME = r"[\^=]?[A-Za-z0-9_.,:\-]+\Z"


def _check_word(option: str, value: Optional[str], pattern=_SLURM_WORD) -> None:
    if value is not None and not re.match(pattern, value):
        raise SpecError(f"{option} {value!r}: contains characters Slurm does not accept here")


def _refuse_both(given: list, advice: str) -> None:
    """Options that exclude each other: given, the (option, value) pairs the user set."""
    if len(given) > 1:
        (first, first_value), (second, second_value) = given[:2]
        raise SpecError(f"{first} {first_value!r} and {second} {second_value!r}: {advice}")


def _check_no_newline(option: str, value: str) -> None:
    if "\n" in value or "\r" in value or "\0" in value:
        raise SpecError(f"{option} {value!r}: must be a single line")


def check(spec) -> None:
    """Every value of the spec, in the order a user meets them: raises SpecError with one line."""
    if not spec.gpus:
        raise SpecError("--nodes: at least one node is needed")
    if spec.launcher not in LAUNCHERS:
        raise SpecError(f"--launcher {spec.launcher!r}: choose one of {', '.join(LAUNCHERS)}")
    if spec.launcher == "accelerate" and len(set(spec.gpus)) > 1:
        layout = ",".join(map(str, spec.gpus))
        raise SpecError(
            f"--launcher accelerate cannot run the uneven layout {layout}: accelerate starts"
            " num_processes // num_machines processes on every node; use --launcher torchrun"
        )
    if not printable_line(spec.job_name):
        raise SpecError(f"--job-name {spec.job_name!r}: must be non-empty printable text on one line")
    for option, value in (("--partition", spec.partition), ("--account", spec.account),
                          ("--qos", spec.qos), ("--exclude", spec.exclude)):
        _check_word(option, value)
    _check_word("--constraint", spec.constraint, _CONSTRAINT)
    _per_node_places(spec)
    if spec.gpu_mem is not None:
        parse_sizes("--gpu-mem", spec.gpu_mem, len(spec.gpus))
    if spec.gpu_type and (len(spec.gpu_type) not in (1, spec.nodes)
                          or not all(re.match(_GRES_TYPE, t) for t in spec.gpu_type)):
        raise SpecError(f"--gpu-type {','.join(spec.gpu_type)!r}: give one GPU type (letters, digits, _ . -)"
                        f" for all nodes, or one per node ({spec.nodes})")
    for host in spec.nodelist:
        _check_word("--nodelist", host)
        if len(host) > HOST_NAME_MAX:  # and hostlist's int() of its digits fails beyond 4,300
            raise SpecError(f"--nodelist {host[:20]!r}...: a host name is at most {HOST_NAME_MAX} characters")
    if spec.nodelist and len(spec.nodelist) != spec.nodes:
        raise SpecError(
            f"--nodelist {','.join(spec.nodelist)!r}: names {len(spec.nodelist)} nodes"
            f" for --nodes {spec.nodes}; give exactly one host per node"
        )
    _pinned_and_excluded(spec)
    if spec.time is not None:
        seconds = parse_time(spec.time)
        if seconds is not None and seconds <= spec.grace:
            raise SpecError(
                f"--time {spec.time!r}: must be longer than the --grace period of {spec.grace} s"
            )
    if spec.cpus_per_gpu < 1:
        raise SpecError(f"--cpus-per-gpu {spec.cpus_per_gpu}: must be a positive integer")
    _resources(spec)
    _faults(spec)
    _work(spec)
    _launch(spec)


def _per_node_places(spec) -> None:
    """--partition: one name, or one per node; --constraint: one Slurm expression, or one per node
    (a list of another length is Slurm's own syntax, as a comma means AND there)."""
    parts = spec.partition.split(",") if spec.partition is not None else []
    if len(parts) not in (0, 1, spec.nodes) or not all(parts):
        raise SpecError(f"--partition {spec.partition!r}: give one partition for all nodes, or one per node"
                        f" ({spec.nodes})")
    features = (spec.constraint or "").split(",")
    if spec.constraint is not None and len(features) == spec.nodes and not all(features):
        raise SpecError(f"--constraint {spec.constraint!r}: an empty entry; give one constraint for all nodes, or"
                        f" one per node ({spec.nodes}), several features of one node joined by &")


def _pinned_and_excluded(spec) -> None:
    """A host both in --nodelist and in --exclude: Slurm would hold the job pending forever."""
    if not (spec.nodelist and spec.exclude):
        return
    import hostlist  # python-hostlist, as --nodelist was expanded

    try:
        excluded = set(hostlist.expand_hostlist(spec.exclude))
    except (hostlist.BadHostlist, ValueError) as err:  # ValueError: digits int() refuses
        raise SpecError(f"--exclude {spec.exclude!r}: {err}") from None
    both = [host for host in spec.nodelist if host in excluded]
    if both:
        raise SpecError(f"--nodelist {hostlist.collect_hostlist(list(spec.nodelist))!r} and --exclude"
                        f" {spec.exclude!r}: {', '.join(both)} in both; Slurm would never start the job")


def _faults(spec) -> None:
    """Ports, the time-limit grace, retries, timeouts and spares."""
    if spec.master_port is not None and not 1024 <= spec.master_port <= 65535:
        raise SpecError(f"--master-port {spec.master_port}: must be between 1024 and 65535")
    if spec.grace < MIN_GRACE:  # --signal=B:USR2@0 would warn no one: the job ends unsaved, never requeued
        raise SpecError(f"--grace {spec.grace}: must be at least {MIN_GRACE} seconds: the ranks checkpoint for 5 s"
                        f" at least after the warning, and the requeue needs 10 s before the time limit")
    if spec.max_restarts < 0:
        raise SpecError(f"--max-restarts {spec.max_restarts}: must be zero or more")
    if spec.rdzv_timeout < 1:
        raise SpecError(f"--rdzv-timeout {spec.rdzv_timeout}: must be a positive number of seconds")
    if spec.collective_timeout < 1:
        raise SpecError(
            f"--collective-timeout {spec.collective_timeout}: must be a positive number of seconds"
        )
    if spec.hang_timeout < 0 or 0 < spec.collective_timeout <= spec.hang_timeout:
        raise SpecError(
            f"--hang-timeout {spec.hang_timeout}: must be 0 (off) or fewer seconds than"
            f" --collective-timeout {spec.collective_timeout}, which would end a hang first"
        )
    if spec.save_timeout is not None and spec.save_timeout < 1:
        raise SpecError(f"--save-timeout {spec.save_timeout}: must be a positive number of seconds")
    if spec.max_failures < 0:
        raise SpecError(f"--max-failures {spec.max_failures}: must be zero or more")
    differ = [o for o, each in (("--gpu-type", spec.gpu_types), ("--partition", spec.partitions),
                                ("--constraint", spec.constraints)) if len(set(each)) > 1]
    if spec.spares < 0 or (spec.spares and differ):
        raise SpecError(f"--spares {spec.spares}: " + ("must be zero or more" if spec.spares < 0 else
                        f"a spare stands in for any node, so the nodes must share one {differ[0]}"))
    spec.slow_nodes.validate()


def _work(spec) -> None:
    """What runs: sweeps, --prep and the target."""
    if spec.sweep:  # the runs themselves: --output_dir given, not too many
        sweep.expand(spec.sweep, spec.sweep_mode, spec.train_args)
    if spec.prep and (spec.exec or spec.script or spec.module != PREP_MODULE):
        raise SpecError(f"--prep: only --module {PREP_MODULE} prepares its data in a job of its own"
                        " (SLURMGEN_PREPARE_ONLY)")
    if spec.prep and not spec.prepared_data:
        raise SpecError("--prep: give the training argument --output_dir DIR; the prepared data goes to"
                        " DIR/prepared-data")
    if spec.max_parallel is not None and (spec.max_parallel < 1 or not spec.sweep):
        raise SpecError(f"--max-parallel {spec.max_parallel}: "
                        + ("must be a positive integer" if spec.sweep else "only with --sweep"))
    _target(spec)


def _launch(spec) -> None:
    """How it starts: resume, NCCL, paths and lines the script writes, the escape hatches."""
    if spec.resume not in ("auto", "off"):
        raise SpecError(f"--resume {spec.resume!r}: choose auto or off")
    if spec.resume == "auto" and not spec.rank_hooks:
        raise SpecError("--resume auto: the rank hooks resume your Trainer; drop --no-rank-hooks")
    if spec.nccl_debug is not None and spec.nccl_debug.upper() not in NCCL_DEBUG_LEVELS:
        raise SpecError(f"--nccl-debug {spec.nccl_debug!r}: choose one of {', '.join(NCCL_DEBUG_LEVELS)}")
    _check_word("--nccl-socket-ifname", spec.nccl_socket_ifname, _IFNAME)
    for option, value in (("--hf-home", spec.hf_home), ("--container-image", spec.container_image),
                          ("--container-mounts", spec.container_mounts)):
        if value is not None:
            _check_no_newline(option, value)
    for line in spec.setup:
        _check_no_newline("--setup", line)
    if not printable_line(spec.log_dir):
        raise SpecError(f"--log-dir {spec.log_dir!r}: must be printable text on one line")
    _check_no_newline("--python", spec.python)
    _logs(spec)
    if spec.slurm_version is not None and not re.match(r"\d{2}\.\d{2}\Z", spec.slurm_version):
        raise SpecError(f"--slurm-version {spec.slurm_version!r}: expected a release such as 22.05,"
                        " 24.11 or 25.11")
    passthrough.validate(spec.sbatch, spec.srun_args, spec.launcher, spec.launcher_args,
                         spec.slurm_version)  # the escape hatches' own rules


def _resources(spec) -> None:
    """Memory, CPUs and placement beyond the layout."""
    given = [(o, v) for o, v in (("--mem", spec.mem), ("--mem-per-gpu", spec.mem_per_gpu),
                                 ("--mem-per-cpu", spec.mem_per_cpu)) if v is not None]
    _refuse_both(given, "choose one way to ask for memory")
    for option, value in given:
        if not re.match(_MEM, value):
            raise SpecError(f"{option} {value!r}: expected a size such as 64G, 512M or 0 (all)")
        if option != "--mem" and int(value.rstrip("KMGT")) == 0:
            raise SpecError(f"{option} {value!r}: must be more than zero")
    if spec.cpus_per_node is not None:
        if spec.cpus_per_node < 1:
            raise SpecError(f"--cpus-per-node {spec.cpus_per_node}: must be a positive integer")
        if spec.launcher == "srun":
            raise SpecError(f"--cpus-per-node {spec.cpus_per_node}: for the launchers with one"
                            " agent per node (torchrun, accelerate); --launcher srun runs a task"
                            " per GPU, use --cpus-per-gpu")
    if spec.hint is not None and spec.hint not in HINTS:
        raise SpecError(f"--hint {spec.hint!r}: choose one of {', '.join(HINTS)}")
    if spec.threads_per_core is not None:
        if spec.threads_per_core < 1:
            raise SpecError(f"--threads-per-core {spec.threads_per_core}: must be a positive integer")
        if spec.hint is not None:
            raise SpecError(f"--hint {spec.hint!r} and --threads-per-core {spec.threads_per_core}:"
                            " Slurm takes only one of them")
    _check_word("--reservation", spec.reservation)
    if spec.mail_type is not None:
        bad = [t for t in spec.mail_type.split(",") if t.upper() not in MAIL_TYPES]
        if bad or not spec.mail_type:
            raise SpecError(f"--mail-type {spec.mail_type!r}: {bad[0] if bad else ''!r} is not one of"
                            f" {', '.join(MAIL_TYPES)} (several: comma-separated)")
    if spec.mail_user is not None and not re.match(_MAIL_USER, spec.mail_user):
        raise SpecError(f"--mail-user {spec.mail_user!r}: expected a user name or an address")


def _logs(spec) -> None:
    """--log-name: a file name in --log-dir, with Slurm's % patterns only."""
    name = spec.log_name
    if not printable_line(name) or "/" in name or name in (".", ".."):
        raise SpecError(f"--log-name {name!r}: a file name (no /) on one line; the directory"
                        " is --log-dir")
    stray = re.sub(_LOG_NAME_PART, "", name)
    if "%" in stray:
        raise SpecError(f"--log-name {name!r}: unknown % pattern; Slurm's are %j (job id), %x"
                        " (job name), %N (first node), %u (user), %A %a %J %n %s %t %b, %% for %")


def _target(spec) -> None:
    """One of --module, --script, --exec, and a valid one."""
    chosen = [(o, v) for o, v in (("--module", spec.module if spec.module != DEFAULT_MODULE else None),
                                  ("--script", spec.script), ("--exec", spec.exec)) if v]
    _refuse_both(chosen, "choose one")
    if spec.exec is not None:
        if not printable_line(spec.exec) or spec.exec.startswith("-"):
            raise SpecError(f"--exec {spec.exec!r}: a program name or path on one line")
    elif spec.script is not None:
        if not os.path.isfile(spec.script):
            raise SpecError(f"--script {spec.script!r}: no such file")
        ceiling_bytes(spec.snapshot_max_size)
    elif not spec.module or not re.match(_MODULE, spec.module):
        raise SpecError(f"--module {spec.module!r}: not a Python module name such as train.sft")
