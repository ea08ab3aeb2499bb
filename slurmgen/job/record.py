"""The job's record and its folder: what the job runtime knows about a job across its runs, one typed
JSON file in LOG_DIR/.slurmgen-JOBID/, beside the files the ranks read and write there."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from slurmgen.contract import ENDED_FILE

# Why a run failed. Node-level failures exclude their node at once; the others after the second
# failure on the same node (once may be the code, twice on one node is the node).
CRASH, HANG, NODE, PREFLIGHT = "crash", "hang", "node", "preflight"
SLOW = "slow"  # the network check or the straggler watch named the node
NODE_LEVEL = (NODE, PREFLIGHT, SLOW)


# The first failure's others get this long to end by themselves before they are stopped (the job
# runtime's and the submit path's fail-fast window alike; SLURMGEN_SETTLE_SECONDS in tests).
SETTLE_SECONDS = 10.0

# Who cancelled a job for good (JobFiles.cancel_mark): the user, or the submit path's hang watch (whose
# cancel is a failure, retried by the submitting side).
USER_CANCEL, HANG_CANCEL = "slurmgen cancel", "hang"


@dataclass(frozen=True)
class JobFiles:
    """The job's folder: LOG_DIR/.slurmgen-JOBID for a rendered script, SUBMITIT_FOLDER/.slurmgen-JOBID
    for the submit path; one per job id, kept across requeues. Every file name of the protocol between
    the job's ranks, its runtime and the submitting side is here."""
    folder: Path

    @classmethod
    def of(cls, logs, job: str) -> "JobFiles":
        return cls(Path(logs) / f".slurmgen-{job}")

    @property
    def record(self) -> Path:  # the JobRecord
        return self.folder / "state.json"

    @property
    def stop(self) -> Path:  # made at a time-limit or preemption warning: ranks checkpoint and stop
        return self.folder / "stop"

    @property
    def outcome(self) -> Path:  # rank 0's word on how training ended: "stopped STEP" or "finished STEP"
        return self.folder / "outcome"

    @property
    def beats(self) -> Path:  # one heartbeat file per rank (train.heartbeat), renewed every run
        return self.folder / "beats"

    def ended(self, rank: int) -> Path:  # rank's script reached its end well (train.script_end), this run
        return self.beats / ENDED_FILE.format(rank=rank)

    @property
    def preflight(self) -> Path:  # every node's preflight report, this run
        return self.folder / "preflight.log"

    @property
    def launch(self) -> Path:  # the script's launch functions, as the runtime runs them
        return self.folder / "launch.sh"

    @property
    def cancelled(self) -> Path:  # cancelled for good: nothing may requeue the job (its text: who, cancel_mark)
        return self.folder / "cancelled"

    def mark_cancelled(self, who: str) -> None:
        """Before the scancel: a requeue decided before Slurm says CANCELLED is refused (slurm.job_info)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        self.cancelled.write_text(who + "\n")

    def cancel_mark(self) -> str:
        """Who cancelled the job for good: USER_CANCEL (`slurmgen cancel`), HANG_CANCEL (the submit path's
        hang watch; an empty mark too), or "" when nobody did."""
        try:
            return self.cancelled.read_text().strip() or HANG_CANCEL
        except OSError:
            return ""

    @property
    def hang_report(self) -> Path:  # every hang's report, beside the job log
        return self.folder.parent / f"hang-report-{self.folder.name.rsplit('-', 1)[1]}.txt"

    def outcome_says(self) -> tuple[str, str]:
        """Rank 0's word on how training ended, and the step: ("stopped", "40"), or ("", "") without one."""
        try:
            how, _, step = self.outcome.read_text().strip().partition(" ")
            return how, step
        except OSError:
            return "", ""

    def clear_job(self) -> None:
        """The folder as a new job finds it, whatever an earlier job of the same id left (set aside whole:
        a person may want to read it)."""
        if self.folder.exists():
            self.folder.rename(self.folder.with_name(f"{self.folder.name}.before-{int(self.folder.stat().st_mtime)}"))

    def clear_run(self) -> None:
        """What one run of the ranks leaves that the next must not read: its outcome, its stop file (a
        straggler's), its beats."""
        import shutil

        self.outcome.unlink(missing_ok=True)
        self.stop.unlink(missing_ok=True)
        shutil.rmtree(self.beats, ignore_errors=True)


@dataclass
class Failure:
    why: str  # CRASH, HANG, NODE, PREFLIGHT or SLOW
    node: str = ""  # Slurm's name of the node it points at, "" when it cannot be told


@dataclass
class RunRecord:
    """One run of the job, as the runtime saw it (what `slurmgen report` counts as allocated time)."""
    started: float  # seconds since the epoch, when the runtime began the run
    nodes: list[str] = field(default_factory=list)
    ended: float = 0.0  # when the runtime ended it; 0 while it runs, or when Slurm ended it
    state: str = ""  # how it ended (runtime.State): finished, requeued, preempted or failed; restarted (--spares)
    network: dict = field(default_factory=dict)  # node -> [send GB/s, receive GB/s, latency ms] (the network check)
    stragglers: dict = field(default_factory=dict)  # node -> its ranks' compute time over the median's, when named
    compute: dict = field(default_factory=dict)  # node -> its ranks' compute seconds per step, the last look


@dataclass
class JobRecord:
    """Across the runs of one job id (each requeue is a new run of the same job)."""
    restarts: int = 0  # requeues at a time-limit warning, up to --max-restarts
    failures: list[Failure] = field(default_factory=list)  # up to --max-failures
    refusals: int = 0  # steps Slurm refused, each answered by a start again in place (requeue.no_failure)
    excluded: list[str] = field(default_factory=list)  # nodes left out of later runs
    # The nodes of the run in progress. The runtime clears it wherever it ends a run itself, so a
    # run that finds it set was ended by Slurm (a node went down).
    open_run: list[str] = field(default_factory=list)
    state: str = ""  # the runtime's last state (runtime.State), for a person reading the file
    runs: list[RunRecord] = field(default_factory=list)  # every run the runtime began, oldest first

    @classmethod
    def load(cls, path: Path) -> "JobRecord":
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            return cls()
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        known["failures"] = [Failure(**f) for f in known.get("failures", [])]
        known["runs"] = [RunRecord(**r) for r in known.get("runs", [])]
        return cls(**known)

    def begin_run(self, started: float, nodes: list[str]) -> None:
        """A new run of the components on these nodes."""
        self.open_run = nodes
        self.runs.append(RunRecord(started, nodes))

    def last_state(self) -> str:
        """How the last run ended ("" when none did, or Slurm ended it)."""
        return self.runs[-1].state if self.runs else ""

    def end_run(self, ended: float, state: str) -> None:
        self.open_run = self.open_run if state == "preempted" else []
        if self.runs:
            self.runs[-1].ended, self.runs[-1].state = ended, state

    def save(self, path: Path) -> None:
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=1) + "\n")
        os.replace(tmp, path)  # whole or not at all: the next run reads it
