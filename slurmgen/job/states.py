"""The job runtime's words: the job as the batch script describes it (JobSpec, one Component per het
component), the states a run goes through, and what one run knows (Run, gone with it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Optional, Union

from slurmgen.job.record import CRASH, JobFiles
from slurmgen.runtime_spec import Component, Preflight, StragglerRule  # noqa: F401  (the runtime's words too)


class State(str, Enum):
    STARTING = "starting"  # counting a run that Slurm ended, checking the failure budget
    PREFLIGHT = "preflight"  # every node reports its software; one that differs stops the job
    TRAINING = "training"  # components running and watched
    CHECKPOINTING = "checkpointing"  # a time-limit or preemption warning: ranks save and stop
    FAILING = "failing"  # a component failed or ranks hang: the others get SETTLE s, then TERM
    FINISHED = "finished"  # final states: the job ends with the run
    REQUEUED = "requeued"  # by the runtime, to resume from the newest checkpoint
    PREEMPTED = "preempted"  # Slurm requeues it at the end of its GraceTime
    FAILED = "failed"


@dataclass(frozen=True)
class JobSpec:
    job: str
    files: JobFiles
    world_size: int
    components: tuple[Component, ...]
    max_restarts: int = 3
    max_failures: int = 2
    hang_timeout: float = 0  # 0: no hang watch
    stop_wait: float = 170  # ranks' time to checkpoint after the warning
    stop_grace: float = 0  # a script that takes no stop file gets this long, then TERM (0: never)
    preflight: Union[bool, Preflight] = False  # what every node must run (a bool in tests)
    poll: float = 1.0
    settle: float = 10.0  # the others' time to end after the first failure
    spares: int = 0  # idle nodes, the last het group: a failed run restarts inside the allocation
    net_check: Optional[tuple[float, float]] = None  # (ratio to the median, floor GB/s); None: no network check
    stragglers: Optional[StragglerRule] = None  # None: no straggler watch

    @property
    def layout(self) -> list[tuple[int, int]]:  # (GPUs per node, nodes) per component
        return [(c.gpus, c.nodes) for c in self.components]


@dataclass
class Run:
    """This run's own facts, gone with it."""
    state: State = State.STARTING
    status: int = 0  # the first failed component's exit status (1 for a hang)
    why: str = CRASH
    suspect: str = ""  # the node a hang points at
    failed_at: float = 0.0
    warned_at: Optional[float] = None
    steps: list = field(default_factory=list)  # (component name, its nodes, process); process None once reaped
    stragglers: set = field(default_factory=set)  # ranks named slow in this run (each once)
    leave_out: str = ""  # the straggler's node this run stops for, to go on without it
