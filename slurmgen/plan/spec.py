"""JobSpec: the validated, frozen description of one training job, and the one declaration of the
job options: each field that is an option carries its flags, help and section (plan.option_fields);
slurmgen.options builds the commands' options and this spec from them.

Every user value is checked here, once (plan.spec_rules), so that planning and rendering can trust
it. A bad value raises SpecError with one line that names the value and what is allowed.
"""

from __future__ import annotations

from typing import Optional

from slurmgen.frozen_records import frozen
from slurmgen.plan import spec_rules
from slurmgen.plan.code_snapshot import DEFAULT_CEILING, CodeSnapshot
from slurmgen.plan.option_fields import (EVERY, FAULTS, FIT, LAUNCH, LAYOUT, OUTPUT, RESOURCES, SCRIPTS, SITE,
                                         SWEEPS, option)
from slurmgen.plan.slow_nodes import SlowNodes
from slurmgen.plan.spec_rules import (CONTAINER_RUNTIMES, DEFAULT_LOG_NAME, DEFAULT_MODULE,  # noqa: F401
                                      DEFAULT_PORT_RANGE, LAUNCHERS, PREP_MODULE, SHIPPED_MODULES)
from slurmgen.plan.sweep import MODES as SWEEP_MODES
from slurmgen.plan.words import TIME_FORMS_TEXT, parse_time, per_node, train_arg

WITH_FIT = SCRIPTS | {FIT}  # --spares: fit says whether its figures hold for a spare


@frozen
class JobSpec:
    """What the user asked for. Built by slurmgen.options from the command line, or directly (tests,
    spec_from_args); `validate()` checks it. Fields in --help's order, section by section."""

    # Layout
    gpus: tuple[int, ...] = option(
        (1,), "--gpus", "-G", section=LAYOUT, metavar="G[,G...]|auto", given=str, commands=EVERY,
        help="GPUs per node: one count for all nodes, or one per node (1,1,2,2); auto: from the GPUs free now"
             " (with --world-size or --max-gpus).")
    gpu_type: tuple[str, ...] = option(
        (), "--gpu-type", section=LAYOUT, metavar="T[,T...]", given=str,
        help="Typed GRES, --gres=gpu:T:N: one GPU type for all nodes, or one per node like --gpus"
             " (a100,a100,h100,h100); nodes of one count and type make one component.")
    nodelist: tuple[str, ...] = option(
        (), "--nodelist", "-w", section=LAYOUT, metavar="HOSTLIST", given=str, commands=EVERY,
        help="Exact hosts, one per node in --gpus order, e.g. node[1-4].")
    exclude: Optional[str] = option(None, "--exclude", "-x", section=LAYOUT, metavar="HOSTLIST",
                                    help="Hosts never to use.")
    exclusive: bool = option(False, "--exclusive", section=LAYOUT,
                             help="Whole nodes: no other job, and no two components of this one, on a node.")
    layout_origin: str = ""                # --gpus auto: how the layout was chosen (header)
    # Resources
    partition: Optional[str] = option(  # per node: spec.partitions
        None, "--partition", "-p", section=RESOURCES, metavar="P[,P...]", commands=EVERY,
        help="Slurm partition: one for all nodes, or one per node like --gpus (small,small,big,big); nodes of"
             " different partitions make different components.")
    account: Optional[str] = option(None, "--account", "-A", section=RESOURCES, help="Slurm account to charge.")
    qos: Optional[str] = option(None, "--qos", section=RESOURCES, help="Slurm quality of service.")
    time: Optional[str] = option(None, "--time", "-t", section=RESOURCES, metavar="TIME",
                                 help=f"Time limit, in Slurm's forms: {TIME_FORMS_TEXT} (25:00 is 25 minutes,"
                                      " not hours); UNLIMITED: the partition's own.")
    cpus_per_gpu: int = option(4, "--cpus-per-gpu", section=RESOURCES, help="CPU cores per GPU.")
    cpus_per_node: Optional[int] = option(
        None, "--cpus-per-node", section=RESOURCES, metavar="N", commands=SCRIPTS,
        help="CPU cores per node instead of per GPU (torchrun, accelerate: one agent per node).")
    mem: Optional[str] = option(None, "--mem", section=RESOURCES, commands=EVERY,
                                help="Memory per node, e.g. 64G (0 = all of it).")
    mem_per_gpu: Optional[str] = option(None, "--mem-per-gpu", section=RESOURCES, metavar="SIZE", commands=EVERY,
                                        help="Memory per GPU: a node gets SIZE times its GPU count.")
    mem_per_cpu: Optional[str] = option(None, "--mem-per-cpu", section=RESOURCES, metavar="SIZE",
                                        help="Memory per CPU core.")
    gpu_mem: Optional[str] = option(  # for slurmgen fit and --check: words.parse_sizes
        None, "--gpu-mem", section=RESOURCES, metavar="SIZE", commands=EVERY,
        help="GPU memory (80G; or one per node like --gpus) for `slurmgen fit` and --check.")
    constraint: Optional[str] = option(  # per node: spec.constraints
        None, "--constraint", "-C", section=RESOURCES, metavar="FEATURES",
        help="Node features required, in Slurm's --constraint syntax ('a100&ib': both on each node, 'a100|h100'"
             " either); a comma-separated list of exactly one entry per node (v100,v100,a100,a100) is per node,"
             " and nodes of different features make different components.")
    hint: Optional[str] = option(
        None, "--hint", section=RESOURCES, metavar="HINT",
        help="Slurm task placement hint: nomultithread, multithread, compute_bound, memory_bound.")
    threads_per_core: Optional[int] = option(None, "--threads-per-core", section=RESOURCES, metavar="N",
                                             help="Hardware threads per core to use (1 = no hyper-threads).")
    reservation: Optional[str] = option(None, "--reservation", section=RESOURCES,
                                        help="Slurm reservation to run in.")
    wait_all_nodes: bool = option(False, "--wait-all-nodes", section=RESOURCES,
                                  help="Start only when every node is booted and ready.")
    # Launch
    launcher: str = option(
        "torchrun", "--launcher", section=LAUNCH, choices=LAUNCHERS, commands=SCRIPTS,
        help="How ranks start: torchrun agent per node, srun task per GPU, or accelerate (uniform layouts only).")
    module: Optional[str] = option(DEFAULT_MODULE, "--module", "-m", section=LAUNCH,
                                   help="Python module to train with.")
    script: Optional[str] = option(None, "--script", section=LAUNCH, help="A Python script to run instead of --module.")
    snapshot: bool = option(
        True, "--snapshot/--no-snapshot", section=LAUNCH,
        help="Run a copy of --script's folder (or its git repository) taken now, under --log-dir/snapshots: every"
             " run of the job runs the code as it was rendered; --no-snapshot: the file as it is when a run starts.")
    snapshot_max_size: str = option(
        DEFAULT_CEILING, "--snapshot-max-size", section=LAUNCH, metavar="SIZE",
        help="Refuse a code snapshot larger than this (500K, 100M, 2G).")
    code: Optional[CodeSnapshot] = None    # measured by render and submit (slurmgen.snapshot); check runs nothing
    exec: Optional[str] = option(  # a program (not Python) run per rank
        None, "--exec", section=LAUNCH, metavar="PROGRAM",
        help="A program that is not Python, run per rank (e.g. a framework's console script).")
    python: str = option("python3", "--python", section=LAUNCH,
                         help="Python on the compute nodes; it runs every step (torchrun and accelerate as -m).")
    env: tuple[tuple[str, str], ...] = option((), "--env", "-e", section=LAUNCH, metavar="KEY=VALUE", given=list,
                                              help="Environment variable for every rank (repeatable).")
    setup: tuple[str, ...] = option(
        (), "--setup", section=LAUNCH, metavar="LINE", given=list,
        help="Shell line run before launching, e.g. 'module load cuda' (repeatable).")
    prep: bool = option(  # a CPU-only job prepares the data first (train.sft)
        False, "--prep", section=LAUNCH, commands=SCRIPTS,
        help="Prepare (tokenize) the data once in a CPU-only job first; training waits for it and never"
             " tokenizes (train.sft).")
    master_port: Optional[int] = option(None, "--master-port", section=LAUNCH,
                                        help="Rendezvous port [default: derived from the job id].")
    master_addr_ip: bool = option(
        False, "--master-addr-ip", section=LAUNCH,
        help="Give ranks rank 0's IPv4 address, not its host name (of the --nccl-socket-ifname interface if one"
             " is named).")
    port_range: tuple[int, int] = option(DEFAULT_PORT_RANGE, "--port-range", section=LAUNCH, given=str, sep="-",
                                         help="Range for the derived port.")
    nccl_debug: Optional[str] = option(None, "--nccl-debug", section=LAUNCH, metavar="LEVEL",
                                       help="NCCL_DEBUG for every rank (WARN, INFO, ...).")
    nccl_socket_ifname: Optional[str] = option(
        None, "--nccl-socket-ifname", section=LAUNCH, metavar="IFACES",
        help="Network interfaces for NCCL and gloo in NCCL's terms: ib (prefixes; gloo gets the node's matching"
             " interface), =ib0 (exact), ^docker,lo (avoid; NCCL only).")
    hf_home: Optional[str] = option(None, "--hf-home", section=LAUNCH, metavar="DIR",
                                    help="Shared Hugging Face cache that every node reads (HF_HOME).")
    offline: bool = option(
        False, "--offline", section=LAUNCH,
        help="Compute nodes never touch the hub: models and data are fetched into --hf-home now, on this node.")
    rank_hooks: bool = option(  # train/rank_hooks on the ranks' PYTHONPATH (user code only)
        True, "--rank-hooks/--no-rank-hooks", section=LAUNCH,
        help="Your own --script or --module gets what the train.* entry points have: a beat at every optimizer"
             " step (hang watch, retries), stacks on a hang; a Hugging Face Trainer also progress.jsonl and a"
             " checkpoint at the time-limit warning.")
    launcher_args: tuple[str, ...] = option(  # added to torchrun or accelerate
        (), "--launcher-arg", section=LAUNCH, metavar="ARG", commands=SCRIPTS,
        help="Added to torchrun or accelerate, e.g. --launcher-arg=--tee=3 (repeatable).")
    srun_args: tuple[str, ...] = option(  # added to every training step
        (), "--srun-arg", section=LAUNCH, metavar="ARG",
        help="Added to every training srun, e.g. --srun-arg=--cpu-bind=cores (repeatable).")
    train_args: tuple[str, ...] = ()       # after --
    # Fault tolerance
    grace: int = option(180, "--grace", section=FAULTS,
                        help="Seconds before the time limit at which ranks checkpoint and the job requeues"
                             f" (at least {spec_rules.MIN_GRACE}).")
    max_restarts: int = option(3, "--max-restarts", section=FAULTS,
                               help="How often a job stopped at its time limit is requeued.")
    max_failures: int = option(
        2, "--max-failures", section=FAULTS,
        help="How often a job that hung or crashed is retried from its newest checkpoint; a node blamed twice (or"
             " marked down) is excluded.")
    spares: int = option(  # idle nodes in the allocation that replace a lost one (render)
        0, "--spares", section=FAULTS, metavar="N", commands=WITH_FIT,
        help="Idle nodes kept in the allocation: one replaces a node that is lost or blamed, and training resumes"
             " from the newest checkpoint without a requeue (rendered scripts).")
    hang_timeout: int = option(  # 0: no hang watch
        300, "--hang-timeout", section=FAULTS, metavar="SECONDS",
        help="Seconds without a step on some rank before the job counts as hung: the stacks of every rank go to"
             " hang-report-JOBID.txt and the job is retried (0: off).")
    save_timeout: Optional[int] = option(  # None: from the saves measured in the run (train.saves)
        None, "--save-timeout", section=FAULTS, metavar="SECONDS",
        help="Seconds a checkpoint save may take before it counts as hung [default: three times the longest save"
             " so far, at least 600].")
    resume: str = option(  # "auto": a user's Trainer resumes by itself
        "off", "--resume", section=FAULTS, choices=("auto", "off"),
        help="auto: a Trainer in your own script resumes from the newest complete checkpoint in its output_dir,"
             " as if it passed resume_from_checkpoint.")
    preflight: bool = option(True, "--preflight/--no-preflight", section=FAULTS, commands=SCRIPTS,
                             help="Compare every node's software before training.")
    rdzv_timeout: int = option(300, "--rdzv-timeout", section=FAULTS, commands=SCRIPTS,
                               help="Seconds to wait for every node to join.")
    collective_timeout: int = option(600, "--collective-timeout", section=FAULTS,
                                     help="Seconds a collective may hang before the job fails.")
    slow_nodes: SlowNodes = SlowNodes()    # the network check and the straggler watch: its own options
    # Sweeps and dependencies
    sweep: tuple = option(  # ((KEY, (V1, V2, ...)), ...): slurmgen.plan.sweep
        (), "--sweep", section=SWEEPS, metavar="KEY=V1,V2", given=list,
        help="Run once per value of training argument --KEY (repeatable: every combination); each run writes to"
             " --output_dir/NAME.")
    sweep_mode: str = option(
        "product", "--sweep-mode", section=SWEEPS, choices=SWEEP_MODES,
        help="product: every combination of the --sweep values; zip: the first values together, then the second...")
    max_parallel: Optional[int] = option(None, "--max-parallel", section=SWEEPS, metavar="N",
                                         help="Runs of a sweep at once [default: all].")
    after: tuple = option(  # ((JOB, afterok|afterany), ...)
        (), "--after", section=SWEEPS, metavar="JOB[:ok|any]", given=list,
        help="Start after job JOB succeeded (ok, the default) or ended (any) (repeatable).")
    # Site and containers
    container_image: Optional[str] = option(None, "--container-image", section=SITE,
                                            help="pyxis/enroot image for every step.")
    container_runtime: str = "pyxis"       # or apptainer/singularity (--container RUNTIME:IMAGE)
    container_mounts: Optional[str] = option(None, "--container-mounts", section=SITE,
                                             help="pyxis/enroot mounts, SRC:DST[,SRC:DST...].")
    slurm_version: Optional[str] = option(  # X.Y; None: the installed sbatch's
        None, "--slurm-version", section=SITE, metavar="X.Y",
        help="Slurm release the job is for, e.g. 25.11 [default: that of the sbatch installed here].")
    sbatch: tuple[str, ...] = option(  # NAME or NAME=VALUE, sbatch long options
        (), "--sbatch", section=SITE, metavar="NAME[=VALUE]",
        help="Any other sbatch long option, without dashes: --sbatch overcommit (repeatable).")
    # Output
    job_name: str = option("slurmgen", "--job-name", "-J", section=OUTPUT, help="Slurm job name.")
    log_dir: str = option(
        "logs", "--log-dir", section=OUTPUT,
        help="Directory for the job log; created now, since Slurm opens the log before the job starts.")
    log_name: str = option(
        DEFAULT_LOG_NAME, "--log-name", section=OUTPUT, metavar="PATTERN", commands=SCRIPTS,
        help="Job log file name in --log-dir; Slurm's %x (job name), %j (job id), %N (node) ...")
    error_log: bool = option(False, "--error-log", section=OUTPUT, commands=SCRIPTS,
                             help="Write stderr to its own file beside the log (the log name with .err).")
    mail_type: Optional[str] = option(None, "--mail-type", section=OUTPUT, metavar="TYPE[,TYPE]",
                                      help="Mail on BEGIN, END, FAIL, ALL, ...")
    mail_user: Optional[str] = option(None, "--mail-user", section=OUTPUT, metavar="ADDRESS",
                                      help="Who gets the mail.")

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
        spec_rules.check(self)
        return self

    @property
    def target(self) -> tuple[str, str]:
        """('module', 'train.sft'), ('script', '/abs/path.py') or ('exec', 'program'): what every rank runs."""
        if self.exec is not None:
            return "exec", self.exec
        if self.script is not None:
            return "script", self.code.script if self.code else self.script  # the snapshot's copy, when taken
        return "module", self.module

    @property
    def gpu_types(self) -> tuple[str, ...]:
        """The GPU type of each node ("" untyped)."""
        return self.gpu_type * self.nodes if len(self.gpu_type) == 1 else self.gpu_type or ("",) * self.nodes

    @property
    def partitions(self) -> tuple[str, ...]:
        """The partition of each node ("": the cluster's default)."""
        return per_node(self.partition, self.nodes)

    @property
    def constraints(self) -> tuple[str, ...]:
        """The --constraint of each node ("": none)."""
        return per_node(self.constraint, self.nodes)

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
