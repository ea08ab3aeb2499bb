"""JobSpec: the validated, frozen description of one training job.

Every user value is checked here, once, so that planning and rendering can trust it. A bad value
raises SpecError with one line that names the value and what is allowed.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Optional

from slurmgen.plan import passthrough, sweep
from slurmgen.plan.slow_nodes import SlowNodes
from slurmgen.plan.words import SpecError, parse_sizes, parse_time, printable_line, train_arg

LAUNCHERS = ("torchrun", "srun", "accelerate")
# --container RUNTIME:IMAGE; pyxis is what --container-image has always meant.
CONTAINER_RUNTIMES = ("apptainer", "singularity", "pyxis")
NCCL_DEBUG_LEVELS = ("VERSION", "WARN", "INFO", "TRACE")
DEFAULT_MODULE = "train.sft"
# The entry points slurmgen ships (the `train` package). A `train.py` in the job's working
# directory (the seed's own file name) would shadow them, since `python -m` puts that directory
# first on sys.path: their jobs export PYTHONSAFEPATH=1 (Python 3.11+; on older Pythons preflight
# reports the target missing), and the submit path imports them without it (slurmgen.submit.task). A
# user's own --module and --script keep Python's rule.
SHIPPED_MODULES = ("train.sft", "train.classify", "train.ddp_loop")
DEFAULT_PORT_RANGE = (20000, 29999)

_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*\Z")
_GRES_TYPE = re.compile(r"[A-Za-z0-9_.\-]+\Z")
_MEM = re.compile(r"[0-9]+[KMGT]?\Z")
MAIL_TYPES = ("NONE", "BEGIN", "END", "FAIL", "REQUEUE", "ALL", "INVALID_DEPEND", "STAGE_OUT",
              "TIME_LIMIT", "TIME_LIMIT_90", "TIME_LIMIT_80", "TIME_LIMIT_50", "ARRAY_TASKS")
HINTS = ("compute_bound", "memory_bound", "multithread", "nomultithread")
DEFAULT_LOG_NAME = "%x-%j.out"
# Slurm's filename patterns (%j job id, %x job name, %N first node, ...), optionally zero-padded.
_LOG_NAME_PART = re.compile(r"%(%|[0-9]*[AabJjNnstux])")
_MAIL_USER = re.compile(r"[A-Za-z0-9_.+\-]+(@[A-Za-z0-9_.\-]+)?\Z")
# Names Slurm takes in #SBATCH lines (partition, account, qos, node lists, features).
_SLURM_WORD = re.compile(r"[A-Za-z0-9_.,:\[\]\-+=@]+\Z")
_CONSTRAINT = re.compile(r"[A-Za-z0-9_.,:\[\]\-+=@&|*()!]+\Z")
_IFNAME = re.compile(r"[\^=]?[A-Za-z0-9_.,:\-]+\Z")


def _check_word(option: str, value: Optional[str], pattern=_SLURM_WORD) -> None:
    if value is not None and not pattern.match(value):
        raise SpecError(f"{option} {value!r}: contains characters Slurm does not accept here")


def _refuse_both(given: list, advice: str) -> None:
    """Options that exclude each other: given, the (option, value) pairs the user set."""
    if len(given) > 1:
        (first, first_value), (second, second_value) = given[:2]
        raise SpecError(f"{first} {first_value!r} and {second} {second_value!r}: {advice}")


def _check_no_newline(option: str, value: str) -> None:
    if "\n" in value or "\r" in value or "\0" in value:
        raise SpecError(f"{option} {value!r}: must be a single line")


@dataclass(frozen=True)
class JobSpec:
    """What the user asked for. Construct through `JobSpec.create` (validates) or directly in tests."""

    gpus: tuple[int, ...]
    gpu_type: tuple[str, ...] = ()         # --gpu-type: one for all nodes, or one per node
    job_name: str = "slurmgen"
    partition: Optional[str] = None
    account: Optional[str] = None
    qos: Optional[str] = None
    time: Optional[str] = None
    cpus_per_gpu: int = 4
    mem: Optional[str] = None
    constraint: Optional[str] = None
    gpu_mem: Optional[str] = None          # for slurmgen fit and --check: words.parse_sizes
    nodelist: tuple[str, ...] = ()
    exclude: Optional[str] = None
    log_dir: str = "logs"
    env: tuple[tuple[str, str], ...] = ()
    setup: tuple[str, ...] = ()
    master_port: Optional[int] = None
    port_range: tuple[int, int] = DEFAULT_PORT_RANGE
    launcher: str = "torchrun"
    module: Optional[str] = DEFAULT_MODULE
    script: Optional[str] = None
    train_args: tuple[str, ...] = ()
    python: str = "python3"
    grace: int = 180
    max_restarts: int = 3
    rdzv_timeout: int = 300
    collective_timeout: int = 600
    hang_timeout: int = 300                # 0: no hang watch
    save_timeout: Optional[int] = None     # None: from the saves measured in the run (train.saves)
    max_failures: int = 2
    spares: int = 0                        # idle nodes in the allocation that replace a lost one (render)
    preflight: bool = True
    slow_nodes: SlowNodes = SlowNodes()    # the network check and the straggler watch
    rank_hooks: bool = True                # train/rank_hooks on the ranks' PYTHONPATH (user code only)
    resume: str = "off"                    # "auto": a user's Trainer resumes by itself
    nccl_debug: Optional[str] = None
    nccl_socket_ifname: Optional[str] = None
    hf_home: Optional[str] = None
    offline: bool = False
    exclusive: bool = False
    container_image: Optional[str] = None
    container_runtime: str = "pyxis"       # or apptainer/singularity (--container RUNTIME:IMAGE)
    container_mounts: Optional[str] = None
    mem_per_gpu: Optional[str] = None
    mem_per_cpu: Optional[str] = None
    cpus_per_node: Optional[int] = None
    reservation: Optional[str] = None
    mail_type: Optional[str] = None
    mail_user: Optional[str] = None
    hint: Optional[str] = None
    threads_per_core: Optional[int] = None
    wait_all_nodes: bool = False
    error_log: bool = False
    log_name: str = DEFAULT_LOG_NAME
    sbatch: tuple[str, ...] = ()           # NAME or NAME=VALUE, sbatch long options
    srun_args: tuple[str, ...] = ()        # added to every training step
    launcher_args: tuple[str, ...] = ()    # added to torchrun or accelerate
    exec: Optional[str] = None             # a program (not Python) run per rank
    master_addr_ip: bool = False
    slurm_version: Optional[str] = None    # X.Y; None: the installed sbatch's
    layout_origin: str = ""                # --gpus auto: how the layout was chosen (header)
    sweep: tuple = ()                      # ((KEY, (V1, V2, ...)), ...): slurmgen.plan.sweep
    sweep_mode: str = "product"
    max_parallel: Optional[int] = None     # runs of a sweep at once
    after: tuple = ()                      # ((JOB, afterok|afterany), ...)
    prep: bool = False                     # a CPU-only job prepares the data first (train.sft)

    @property
    def prepared_data(self) -> Optional[str]:
        """--prep: where the prep job saves the prepared data, under the training --output_dir."""
        if not self.prep:
            return None
        base = train_arg(self.train_args, "--output_dir", "--output-dir")
        return f"{base.rstrip('/')}/prepared-data" if base else None

    @property
    def nodes(self) -> int:
        return len(self.gpus)

    @property
    def time_seconds(self) -> Optional[int]:
        return parse_time(self.time) if self.time else None

    def validate(self) -> "JobSpec":
        if not self.gpus:
            raise SpecError("--nodes: at least one node is needed")
        if self.launcher not in LAUNCHERS:
            raise SpecError(f"--launcher {self.launcher!r}: choose one of {', '.join(LAUNCHERS)}")
        if self.launcher == "accelerate" and len(set(self.gpus)) > 1:
            layout = ",".join(map(str, self.gpus))
            raise SpecError(
                f"--launcher accelerate cannot run the uneven layout {layout}: accelerate starts"
                " num_processes // num_machines processes on every node; use --launcher torchrun"
            )
        if not printable_line(self.job_name):
            raise SpecError(f"--job-name {self.job_name!r}: must be non-empty printable text on one line")
        for option, value in (("--partition", self.partition), ("--account", self.account),
                              ("--qos", self.qos), ("--exclude", self.exclude)):
            _check_word(option, value)
        _check_word("--constraint", self.constraint, _CONSTRAINT)
        if self.gpu_mem is not None:
            parse_sizes("--gpu-mem", self.gpu_mem, len(self.gpus))
        if self.gpu_type and (len(self.gpu_type) not in (1, self.nodes)
                              or not all(_GRES_TYPE.match(t) for t in self.gpu_type)):
            raise SpecError(f"--gpu-type {','.join(self.gpu_type)!r}: give one GPU type (letters, digits, _ . -)"
                            f" for all nodes, or one per node ({self.nodes})")
        for host in self.nodelist:
            _check_word("--nodelist", host)
        if self.nodelist and len(self.nodelist) != self.nodes:
            raise SpecError(
                f"--nodelist {','.join(self.nodelist)!r}: names {len(self.nodelist)} nodes"
                f" for --nodes {self.nodes}; give exactly one host per node"
            )
        if self.time is not None:
            seconds = parse_time(self.time)
            if seconds is not None and seconds <= self.grace:
                raise SpecError(
                    f"--time {self.time!r}: must be longer than the --grace period of {self.grace} s"
                )
        if self.cpus_per_gpu < 1:
            raise SpecError(f"--cpus-per-gpu {self.cpus_per_gpu}: must be a positive integer")
        self._validate_resources()
        if self.master_port is not None and not 1024 <= self.master_port <= 65535:
            raise SpecError(f"--master-port {self.master_port}: must be between 1024 and 65535")
        if self.grace < 0:
            raise SpecError(f"--grace {self.grace}: must be zero or more seconds")
        if self.max_restarts < 0:
            raise SpecError(f"--max-restarts {self.max_restarts}: must be zero or more")
        if self.rdzv_timeout < 1:
            raise SpecError(f"--rdzv-timeout {self.rdzv_timeout}: must be a positive number of seconds")
        if self.collective_timeout < 1:
            raise SpecError(
                f"--collective-timeout {self.collective_timeout}: must be a positive number of seconds"
            )
        if self.hang_timeout < 0 or 0 < self.collective_timeout <= self.hang_timeout:
            raise SpecError(
                f"--hang-timeout {self.hang_timeout}: must be 0 (off) or fewer seconds than"
                f" --collective-timeout {self.collective_timeout}, which would end a hang first"
            )
        if self.save_timeout is not None and self.save_timeout < 1:
            raise SpecError(f"--save-timeout {self.save_timeout}: must be a positive number of seconds")
        if self.max_failures < 0:
            raise SpecError(f"--max-failures {self.max_failures}: must be zero or more")
        if self.spares < 0 or (self.spares and len(set(self.gpu_types)) > 1):
            raise SpecError(f"--spares {self.spares}: " + ("must be zero or more" if self.spares < 0 else
                            "a spare stands in for any node, so the nodes must share one --gpu-type"))
        self.slow_nodes.validate()
        if self.sweep:  # the runs themselves: --output_dir given, not too many
            sweep.expand(self.sweep, self.sweep_mode, self.train_args)
        if self.prep and (self.exec or self.script or self.module != PREP_MODULE):
            raise SpecError(f"--prep: only --module {PREP_MODULE} prepares its data in a job of its own"
                            " (SLURMGEN_PREPARE_ONLY)")
        if self.prep and not self.prepared_data:
            raise SpecError("--prep: give the training argument --output_dir DIR; the prepared data goes to"
                            " DIR/prepared-data")
        if self.max_parallel is not None and (self.max_parallel < 1 or not self.sweep):
            raise SpecError(f"--max-parallel {self.max_parallel}: "
                            + ("must be a positive integer" if self.sweep else "only with --sweep"))
        self._validate_target()
        if self.resume not in ("auto", "off"):
            raise SpecError(f"--resume {self.resume!r}: choose auto or off")
        if self.resume == "auto" and not self.rank_hooks:
            raise SpecError("--resume auto: the rank hooks resume your Trainer; drop --no-rank-hooks")
        if self.nccl_debug is not None and self.nccl_debug.upper() not in NCCL_DEBUG_LEVELS:
            raise SpecError(f"--nccl-debug {self.nccl_debug!r}: choose one of {', '.join(NCCL_DEBUG_LEVELS)}")
        _check_word("--nccl-socket-ifname", self.nccl_socket_ifname, _IFNAME)
        for option, value in (("--hf-home", self.hf_home), ("--container-image", self.container_image),
                              ("--container-mounts", self.container_mounts)):
            if value is not None:
                _check_no_newline(option, value)
        for line in self.setup:
            _check_no_newline("--setup", line)
        if not printable_line(self.log_dir):
            raise SpecError(f"--log-dir {self.log_dir!r}: must be printable text on one line")
        _check_no_newline("--python", self.python)
        self._validate_logs()
        if self.slurm_version is not None and not re.match(r"\d{2}\.\d{2}\Z", self.slurm_version):
            raise SpecError(f"--slurm-version {self.slurm_version!r}: expected a release such as 22.05,"
                            " 24.11 or 25.11")
        passthrough.validate(self.sbatch, self.srun_args, self.launcher, self.launcher_args,
                             self.slurm_version)  # the escape hatches' own rules
        return self

    def _validate_resources(self) -> None:
        """Memory, CPUs and placement beyond the layout."""
        given = [(o, v) for o, v in (("--mem", self.mem), ("--mem-per-gpu", self.mem_per_gpu),
                                     ("--mem-per-cpu", self.mem_per_cpu)) if v is not None]
        _refuse_both(given, "choose one way to ask for memory")
        for option, value in given:
            if not _MEM.match(value):
                raise SpecError(f"{option} {value!r}: expected a size such as 64G, 512M or 0 (all)")
            if option != "--mem" and int(value.rstrip("KMGT")) == 0:
                raise SpecError(f"{option} {value!r}: must be more than zero")
        if self.cpus_per_node is not None:
            if self.cpus_per_node < 1:
                raise SpecError(f"--cpus-per-node {self.cpus_per_node}: must be a positive integer")
            if self.launcher == "srun":
                raise SpecError(f"--cpus-per-node {self.cpus_per_node}: for the launchers with one"
                                " agent per node (torchrun, accelerate); --launcher srun runs a task"
                                " per GPU, use --cpus-per-gpu")
        if self.hint is not None and self.hint not in HINTS:
            raise SpecError(f"--hint {self.hint!r}: choose one of {', '.join(HINTS)}")
        if self.threads_per_core is not None:
            if self.threads_per_core < 1:
                raise SpecError(f"--threads-per-core {self.threads_per_core}: must be a positive integer")
            if self.hint is not None:
                raise SpecError(f"--hint {self.hint!r} and --threads-per-core {self.threads_per_core}:"
                                " Slurm takes only one of them")
        _check_word("--reservation", self.reservation)
        if self.mail_type is not None:
            bad = [t for t in self.mail_type.split(",") if t.upper() not in MAIL_TYPES]
            if bad or not self.mail_type:
                raise SpecError(f"--mail-type {self.mail_type!r}: {bad[0] if bad else ''!r} is not one of"
                                f" {', '.join(MAIL_TYPES)} (several: comma-separated)")
        if self.mail_user is not None and not _MAIL_USER.match(self.mail_user):
            raise SpecError(f"--mail-user {self.mail_user!r}: expected a user name or an address")

    def _validate_logs(self) -> None:
        name = self.log_name
        if not printable_line(name) or "/" in name or name in (".", ".."):
            raise SpecError(f"--log-name {name!r}: a file name (no /) on one line; the directory"
                            " is --log-dir")
        stray = _LOG_NAME_PART.sub("", name)
        if "%" in stray:
            raise SpecError(f"--log-name {name!r}: unknown % pattern; Slurm's are %j (job id), %x"
                            " (job name), %N (first node), %u (user), %A %a %J %n %s %t %b, %% for %")

    def _validate_target(self) -> None:
        chosen = [(o, v) for o, v in (("--module", self.module if self.module != DEFAULT_MODULE else None),
                                      ("--script", self.script), ("--exec", self.exec)) if v]
        _refuse_both(chosen, "choose one")
        if self.exec is not None:
            if not printable_line(self.exec) or self.exec.startswith("-"):
                raise SpecError(f"--exec {self.exec!r}: a program name or path on one line")
        elif self.script is not None:
            if not os.path.isfile(self.script):
                raise SpecError(f"--script {self.script!r}: no such file")
        elif not self.module or not _MODULE.match(self.module):
            raise SpecError(f"--module {self.module!r}: not a Python module name such as train.sft")

    @property
    def target(self) -> tuple[str, str]:
        """('module', 'train.sft'), ('script', '/abs/path.py') or ('exec', 'program')."""
        if self.exec is not None:
            return "exec", self.exec
        if self.script is not None:
            return "script", self.script
        return "module", self.module

    @property
    def gpu_types(self) -> tuple[str, ...]:
        """The GPU type of each node ("" untyped)."""
        return self.gpu_type * self.nodes if len(self.gpu_type) == 1 else self.gpu_type or ("",) * self.nodes

    @property
    def rank_hooks_on(self) -> bool:
        """Whether the ranks load train/rank_hooks: the user's own code, unless --no-rank-hooks
        (slurmgen's entry points beat and stop by themselves)."""
        return self.rank_hooks and not (self.target[0] == "module" and self.module in SHIPPED_MODULES)

    @property
    def threads_per_rank(self) -> int:
        """OMP_NUM_THREADS: the CPUs of one rank (with --cpus-per-node, those of the busiest node)."""
        if self.cpus_per_node is not None:
            return max(1, self.cpus_per_node // max(self.gpus))
        return self.cpus_per_gpu

    @property
    def error_name(self) -> str:
        """The stderr file beside the log (--error-log): its name with .err for .out."""
        stem = self.log_name[:-4] if self.log_name.endswith(".out") else self.log_name
        return stem + ".err"


PREP_MODULE = "train.sft"


