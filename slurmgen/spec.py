"""JobSpec: the validated, frozen description of one training job.

Every user value is checked here, once, so that planning and rendering can trust it. A bad value
raises SpecError with one line that names the value and what is allowed.
"""

from __future__ import annotations

import itertools
import os
import re
import unicodedata
from dataclasses import dataclass
from typing import Optional

LAUNCHERS = ("torchrun", "srun", "accelerate")
# --container RUNTIME:IMAGE; pyxis is what --container-image has always meant.
CONTAINER_RUNTIMES = ("apptainer", "singularity", "pyxis")
NCCL_DEBUG_LEVELS = ("VERSION", "WARN", "INFO", "TRACE")
DEFAULT_MODULE = "train.sft"
# The entry points slurmgen ships (the `train` package). A `train.py` in the job's working
# directory (the seed's own file name) would shadow them, since `python -m` puts that directory
# first on sys.path: their jobs export PYTHONSAFEPATH=1 (Python 3.11+; on older Pythons preflight
# reports the target missing), and the submit path imports them without it (slurmgen.task). A
# user's own --module and --script keep Python's rule.
SHIPPED_MODULES = ("train.sft", "train.classify", "train.ddp_loop")
DEFAULT_PORT_RANGE = (20000, 29999)

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
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
# Slurm --time forms: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S.
_TIME_FORMS = (
    (re.compile(r"(\d+)\Z"), ("m",)),
    (re.compile(r"(\d+):(\d{1,2})\Z"), ("m", "s")),
    (re.compile(r"(\d+):(\d{1,2}):(\d{1,2})\Z"), ("h", "m", "s")),
    (re.compile(r"(\d+)-(\d+)\Z"), ("d", "h")),
    (re.compile(r"(\d+)-(\d+):(\d{1,2})\Z"), ("d", "h", "m")),
    (re.compile(r"(\d+)-(\d+):(\d{1,2}):(\d{1,2})\Z"), ("d", "h", "m", "s")),
)
_UNIT_SECONDS = {"d": 86400, "h": 3600, "m": 60, "s": 1}


def printable_line(text: str) -> bool:
    """Non-empty, no control characters or line breaks (any script, any symbol, any space)."""
    return bool(text) and not any(unicodedata.category(c)[0] == "C" or c in "\u2028\u2029\x85"
                                  for c in text)


class SpecError(ValueError):
    """A user value is not acceptable; the message is the one line shown to the user."""


def _expand_counts(text: str) -> tuple[list[str], list[int]]:
    """'8x2,4' -> (['8x2', '4'], [8, 8, 4]); SpecError names the part that is not a count."""
    counts: list[int] = []
    parts = [p.strip() for p in str(text).split(",")]
    for part in parts:
        count, sep, repeat = part.partition("x")
        if not count.isdigit() or int(count) < 1:
            raise SpecError(f"--gpus {text!r}: {part!r} is not a positive integer GPU count")
        if sep and (not repeat.isdigit() or int(repeat) < 1):
            raise SpecError(f"--gpus {text!r}: {part!r} should be COUNTxNODES, e.g. 8x4")
        counts += [int(count)] * (int(repeat) if sep else 1)
    return parts, counts


def parse_gpus(text: str, nodes: int) -> tuple[int, ...]:
    """'1,1,2,2' -> (1, 1, 2, 2); '8x512,4x512' repeats a count; a single count applies to every node."""
    if nodes < 1:
        raise SpecError(f"--nodes {nodes}: must be a positive integer")
    parts, counts = _expand_counts(text)
    if len(parts) == 1 and "x" not in parts[0]:
        return tuple(counts * nodes)
    if len(counts) != nodes:
        raise SpecError(
            f"--gpus {text!r}: {len(counts)} counts given for --nodes {nodes};"
            f" give one count per node or a single count for all"
        )
    return tuple(counts)


def count_runs(counts) -> list[tuple[int, int]]:
    """(1, 1, 2, 2) -> [(1, 2), (2, 2)]: each count with the number of nodes in its run."""
    return [(count, len(list(run))) for count, run in itertools.groupby(counts)]


def compact_gpus(text: str) -> str:
    """--gpus as written -> the same layout with runs of three or more as COUNTxNODES, so that
    1,024 counts written out record as '8x512,4x512'; text that is not a layout is kept."""
    try:
        _, counts = _expand_counts(text)
    except SpecError:
        return text
    words = [f"{c}x{n}" if n >= 3 else ",".join([str(c)] * n) for c, n in count_runs(counts)]
    compact = ",".join(words)
    return compact if len(compact) < len(text) else text


def parse_time(text: str) -> Optional[int]:
    """Slurm --time to seconds; None for UNLIMITED/INFINITE."""
    if text.upper() in ("UNLIMITED", "INFINITE"):
        return None
    for pattern, units in _TIME_FORMS:
        match = pattern.match(text)
        if match:
            return sum(int(v) * _UNIT_SECONDS[u] for v, u in zip(match.groups(), units))
    raise SpecError(
        f"--time {text!r}: not a Slurm time; use MINUTES, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS"
    )


def parse_env(items) -> tuple[tuple[str, str], ...]:
    pairs = []
    for item in items:
        if "=" not in item:
            raise SpecError(f"--env {item!r}: expected KEY=VALUE")
        key, value = item.split("=", 1)
        if not _ENV_NAME.match(key):
            raise SpecError(
                f"--env {item!r}: {key!r} is not a valid variable name"
                " (letters, digits and _, not starting with a digit)"
            )
        pairs.append((key, value))
    return tuple(pairs)


def scale_mem(size: str, factor: int) -> str:
    """'16G' x 2 -> '32G': memory for a node of `factor` GPUs, in the unit it was given in."""
    if size[-1].isalpha():
        return f"{int(size[:-1]) * factor}{size[-1]}"
    return str(int(size) * factor)


def parse_port_range(text: str) -> tuple[int, int]:
    match = re.match(r"(\d+)-(\d+)\Z", str(text))
    if not match:
        raise SpecError(f"--port-range {text!r}: expected LOW-HIGH, e.g. 20000-29999")
    low, high = int(match.group(1)), int(match.group(2))
    if not 1024 <= low <= high <= 65535:
        raise SpecError(f"--port-range {text!r}: need 1024 <= LOW <= HIGH <= 65535")
    return low, high


# The master port of a job: LOW + job id % span, the same for every task of the job and
# different for neighbouring jobs. Rendered scripts evaluate it in the batch shell, the submit
# path in each task; both come from here (the training side only reads MASTER_PORT).
def job_port(job_id: str, port_range: tuple[int, int]) -> int:
    low, high = port_range
    digits = "".join(c for c in str(job_id) if c.isdigit()) or "0"
    return low + int(digits) % (high - low + 1)


def job_port_shell(port_range: tuple[int, int]) -> str:
    """job_port as shell arithmetic on $SLURM_JOB_ID."""
    low, high = port_range
    return f"{low} + SLURM_JOB_ID % {high - low + 1}"


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
    gpu_mem: Optional[str] = None          # for slurmgen fit and --check: slurmgen.fit.parse_sizes
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
    preflight: bool = True
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
    sweep: tuple = ()                      # ((KEY, (V1, V2, ...)), ...): slurmgen.sweep
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
            from slurmgen.fit import FitError, parse_sizes

            try:
                parse_sizes("--gpu-mem", self.gpu_mem, len(self.gpus))
            except FitError as err:
                raise SpecError(str(err)) from None
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
        if self.sweep:  # the runs themselves: --output_dir given, not too many
            from slurmgen.sweep import expand
            expand(self.sweep, self.sweep_mode, self.train_args)
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
        from slurmgen import passthrough  # the escape hatches' own rules

        passthrough.validate(self)
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


def train_arg(args, *flags: str) -> Optional[str]:
    """The value a training argument (--flag VALUE or --flag=VALUE) was given; the last one wins,
    as it does for the argument parsers of the entry points. None if absent or valueless."""
    args = list(args)
    value = None
    for i, arg in enumerate(args):
        for flag in flags:
            if arg == flag and i + 1 < len(args):
                value = args[i + 1]
            elif arg.startswith(flag + "="):
                value = arg.split("=", 1)[1]
    return value


def container_dirs(spec: JobSpec, *dirs: Optional[str]) -> list[str]:
    """Directories the ranks share with the batch shell or the submitting side, mounted at the
    same path inside a container: the given ones (log dir for the stop and outcome files,
    working directory) and an absolute --output_dir (a relative one is under the working
    directory)."""
    out = train_arg(spec.train_args, "--output_dir", "--output-dir")
    wanted = [*dirs, out if out and os.path.isabs(out) else None]
    return list(dict.fromkeys(d for d in wanted if d))


def container_args(spec: JobSpec, workdir: str, *dirs: Optional[str], name: Optional[str] = None) -> list[str]:
    """pyxis/enroot srun flags, only when asked for; rendered scripts quote them, submit passes
    them as argv. With an image: the user's mounts plus container_dirs at the same path, the
    working directory inside, and a name so that a job's steps import the image once per node."""
    if spec.container_runtime != "pyxis":
        return []
    if not spec.container_image:
        return [f"--container-mounts={spec.container_mounts}"] if spec.container_mounts else []
    mounts = [spec.container_mounts] if spec.container_mounts else []
    mounts += [f"{d}:{d}" for d in container_dirs(spec, workdir, *dirs)]
    flags = [f"--container-image={spec.container_image}"]
    if name:
        flags.append(f"--container-name={name}")
    return flags + [f"--container-mounts={','.join(mounts)}", f"--container-workdir={workdir}"]


def container_exec(spec: JobSpec, workdir: str, *dirs: Optional[str]) -> list[str]:
    """With --container apptainer:IMAGE (or singularity): the words that run a step's command in
    the image, GPUs passed in (--nv), the user's mounts plus container_dirs bound at the same
    path, the working directory inside. Nothing for pyxis, whose flags go to srun itself."""
    if spec.container_runtime == "pyxis" or not spec.container_image:
        return []
    binds = ([spec.container_mounts] if spec.container_mounts else []) + container_dirs(spec, workdir, *dirs)
    return [spec.container_runtime, "exec", "--nv", "--bind", ",".join(binds), "--pwd", workdir, spec.container_image]


def gloo_socket_ifname(nccl_value: str) -> Optional[str]:
    """NCCL's interface list in gloo's terms, where it can be told before the job runs: gloo takes
    exact names, NCCL's "=" list. A plain list is prefixes to NCCL ("ib" is ib0, ib1, ...), which
    each node resolves itself (iface_prefixes); "^" (names to avoid) gloo cannot express: then gloo
    is left to pick the interface of the host's own address."""
    return nccl_value[1:] if nccl_value.startswith("=") else None


def iface_prefixes(nccl_value: str) -> list[str]:
    """The prefixes of a plain --nccl-socket-ifname list (none for "=" and "^" lists)."""
    return [] if nccl_value[:1] in ("=", "^") else [p for p in nccl_value.split(",") if p]


def matching_iface(prefixes: list[str], names: list[str]) -> Optional[str]:
    """The first interface, in the given order of names, that starts with one of the prefixes."""
    return next((n for n in names if any(n.startswith(p) for p in prefixes)), None)


PREP_MODULE = "train.sft"


def rank_exports(spec: JobSpec) -> list[tuple[str, str]]:
    """Variables slurmgen's own options set for every rank (before the user's --env), shared by
    rendered scripts and the submit path."""
    pairs = []
    if spec.target[0] == "module" and spec.module in SHIPPED_MODULES:
        pairs.append(("PYTHONSAFEPATH", "1"))
    if spec.resume == "auto" and spec.rank_hooks_on:
        pairs.append(("SLURMGEN_RESUME", "auto"))  # train.trainer_hooks
    if spec.save_timeout:
        pairs.append(("SLURMGEN_SAVE_TIMEOUT", str(spec.save_timeout)))
    if spec.nccl_debug:
        pairs.append(("NCCL_DEBUG", spec.nccl_debug.upper()))
    if spec.nccl_socket_ifname:
        pairs.append(("NCCL_SOCKET_IFNAME", spec.nccl_socket_ifname))
        gloo = gloo_socket_ifname(spec.nccl_socket_ifname)
        if gloo:
            pairs.append(("GLOO_SOCKET_IFNAME", gloo))
    if spec.hf_home:
        pairs.append(("HF_HOME", spec.hf_home))
    if spec.offline:
        pairs += [("HF_HUB_OFFLINE", "1"), ("HF_DATASETS_OFFLINE", "1"), ("TRANSFORMERS_OFFLINE", "1")]
    if spec.prepared_data:  # train.sft loads it and does not tokenize
        pairs.append(("SLURMGEN_PREPARED_DATA", spec.prepared_data))
    return pairs
