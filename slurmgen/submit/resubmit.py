"""Whether a failed submitted job is submitted again, and with which spec: the one retry decision of
`slurmgen submit` and `slurmgen.run`, by the failure policy both paths share (slurmgen.job.policy).

The caller follows the job and, after a failure, asks after_failure for the Next step: the spec to
submit (None: stop) and the lines to say, which it says its own way (click; slurmgen.run's `say`).
decide_next is the decision itself, pure but for the one question it asks Slurm (does the partition
still hold the layout without the nodes left out), and only when a retry would leave one out."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable, Optional

from slurmgen.job import policy, slurm
from slurmgen.job.record import CRASH, HANG

ACTION = "submitting again to resume from the newest checkpoint"
FUNCTION_ACTION = "submitting again; the function starts again from the top"


@dataclass(frozen=True)
class Retries:
    """What the job's earlier submissions leave to the next decision."""
    user: tuple[str, ...] = ()  # the user's own --exclude, expanded: every retry keeps it
    failures: tuple = ()  # record.Failure, counted across the submissions
    excluded: tuple[str, ...] = ()  # the nodes the retries left out

    @classmethod
    def of(cls, spec) -> "Retries":
        import hostlist

        return cls(tuple(hostlist.expand_hostlist(spec.exclude)) if spec.exclude else ())


@dataclass(frozen=True)
class Next:
    spec: Optional[object]  # the JobSpec to submit now; None: stop, the failure stands
    lines: tuple[str, ...]  # to say, each after "slurmgen: "
    retries: Retries


def _fits(spec, names: list[str]) -> bool:
    return slurm.fits_without([(g, 1) for g in spec.gpus], spec.partitions[0], names)


def decide_next(spec, retries: Retries, seen: policy.Seen, action: str = ACTION,
                fits: Optional[Callable[[list[str]], bool]] = None) -> Next:
    """After a failed submission of `spec`: the policy's decision, then whether the partition holds the
    layout without the nodes it leaves out (``fits(names)``, by default Slurm's answer)."""
    import hostlist

    decision = policy.decide(list(retries.failures), list(retries.excluded), seen, spec.max_failures)
    counted = dataclasses.replace(retries, failures=decision.failures)
    if not decision.retry:
        return Next(None, (decision.said,), counted)
    names = sorted(set(retries.user) | set(decision.exclude))
    if decision.reasons and not (fits or (lambda left_out: _fits(spec, left_out)))(names):
        return Next(None, (policy.no_room(decision),), counted)
    # Pinned nodes (--nodelist, --gpus auto) must give way to the exclusion: Slurm places the job anew.
    pins = () if set(spec.nodelist) & set(decision.exclude) else spec.nodelist
    again = dataclasses.replace(spec, exclude=hostlist.collect_hostlist(names) if names else None, nodelist=pins)
    return Next(again, (policy.retry_line(decision, spec.max_failures, action),),
                dataclasses.replace(counted, excluded=tuple(decision.exclude)))


def began(failure, progress: Optional[dict], submitted_at: float, hung: bool, function: bool) -> bool:
    """Whether a rank had begun before the failure: it beat (a hang) or logged a step since this
    submission. A function (slurmgen.run) has no step to log: for one it is enough that the failed task
    got as far as calling it (its start line named the node), not a task that could not start."""
    if hung or (progress and float(progress.get("time", 0)) >= submitted_at):
        return True
    return function and failure is not None and failure.task is not None and bool(failure.host)


def seen_of(sub, err, watch, function: bool = False) -> Optional[policy.Seen]:
    """What the failed submission showed (err: its JobFailed; watch: its hang watch or None); None for
    a user's scancel, which is final."""
    hung = watch is not None and watch.hung
    if err.state == "CANCELLED" and not (hung or sub.cancelled_here):
        return None
    failure = err.failure
    host = watch.suspect if hung else sub.crashed_host() or (failure.host if failure else None)
    trained = began(failure, sub.status().progress, sub.submitted_at, hung, function)
    return policy.Seen(HANG if hung else CRASH, slurm.node_name(host or "", []), trained=trained)  # Slurm's name


def after_failure(spec, sub, err, watch, retries: Retries, function: bool = False) -> Next:
    """The Next step after submission `sub` of `spec` failed with JobFailed `err`."""
    seen = seen_of(sub, err, watch, function)
    if seen is None:
        return Next(None, (f"job {sub.job_id} was cancelled (scancel): not submitting it again",), retries)
    return decide_next(spec, retries, seen, FUNCTION_ACTION if function else ACTION)
