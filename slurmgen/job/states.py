"""The job runtime's words: the job it runs (Job: the script's RuntimeSpec, Slurm's job id, the job's
folder), the states a run goes through, what one run knows (Run, gone with it), and how the job ends
(Result; exit_status is the one place that turns it into the batch script's exit status)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Optional

from slurmgen.job.record import CRASH, SETTLE_SECONDS, JobFiles
from slurmgen.runtime_spec import Component, Preflight, RuntimeSpec, StragglerRule  # noqa: F401  (its words too)


class State(str, Enum):
    STARTING = "starting"  # counting a run that Slurm ended, checking the failure budget
    PREFLIGHT = "preflight"  # every node reports its software, then the links are timed
    TRAINING = "training"  # components running and watched
    CHECKPOINTING = "checkpointing"  # a time-limit or preemption warning: ranks save and stop
    FAILING = "failing"  # a component failed or ranks hang: the others get SETTLE s, then TERM
    RESTARTED = "restarted"  # --spares: the run ended, the next starts inside the allocation
    FINISHED = "finished"  # final states: the job ends with the run
    REQUEUED = "requeued"  # by the runtime, to resume from the newest checkpoint
    PREEMPTED = "preempted"  # Slurm requeues it at the end of its GraceTime
    FAILED = "failed"
    CANCELLED = "cancelled"  # by the user (scancel): final, never requeued


@dataclass(frozen=True)
class Job:
    """The job the runtime runs: what the script asked (its runtime spec), and where it is."""
    spec: RuntimeSpec
    id: str
    files: JobFiles
    poll: float = 1.0  # seconds between looks
    settle: float = SETTLE_SECONDS  # the others' time to end after the first failure


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


@dataclass(frozen=True)
class Result:
    """How the job ends (FINISHED, REQUEUED, PREEMPTED or FAILED), or a run ends inside it (RESTARTED)."""
    state: State
    status: int = 0  # a failed job's: its first failed component's exit status


def exit_status(result: Result) -> int:
    """The batch script's exit status: 0 unless the job failed (then Slurm says FAILED and never requeues)."""
    if result.state == State.FAILED:
        return result.status or 1
    return result.status if result.state == State.FINISHED else 0
