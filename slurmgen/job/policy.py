"""The failure policy, one for both paths (a rendered script's job runtime and the submit path): a
failed run is counted, a node blamed, the nodes a retry leaves out named, and a retry allowed or not,
with the reason in words. Pure: what each path saw comes in as Seen; the path acts on the Decision (a
requeue, a spare, a new submission), asking Slurm whether the partition can do without the nodes it
leaves out, and says it in its own verb."""

from __future__ import annotations

from dataclasses import dataclass, field

from slurmgen.job.record import NODE, NODE_LEVEL, PREFLIGHT, SLOW, Failure
from slurmgen.job.retry import to_exclude


@dataclass(frozen=True)
class Seen:
    """What the path saw of a failed run."""
    why: str  # record.CRASH, HANG, NODE, PREFLIGHT or SLOW
    node: str = ""  # Slurm's name of the node it points at ("" when it cannot be told)
    gone: dict = field(default_factory=dict)  # nodes Slurm (or a probe) says are lost: node -> what it says
    trained: bool = True  # a rank had begun training (a beat, a progress line)
    refused: bool = False  # Slurm refused a step, or a node could not start its tasks: not the code's doing
    uncreated: bool = False  # of those, a step the controller refused to create: no node's doing either


@dataclass(frozen=True)
class Decision:
    retry: bool
    why: str  # as counted: a lost node makes any failure a node's
    node: str
    failures: tuple[Failure, ...]  # the job's, this one counted (where it counts)
    exclude: tuple[str, ...] = ()  # every node a retry leaves out: the job's so far and the new ones
    reasons: tuple[str, ...] = ()  # the new ones, each with why: "node3 (2nd failure there)"
    said: str = ""  # without a retry: why not, for the log (after "slurmgen: ")

    @property
    def count(self) -> int:
        return len(self.failures)

    @property
    def where(self) -> str:
        return f" on {self.node}" if self.node else ""


def decide(failures: list[Failure], excluded: list[str], seen: Seen, max_failures: int) -> Decision:
    """The decision after a failed run. failures, excluded: the job's so far. Whether the partition still
    holds the layout without the nodes left out is the path's to ask (Slurm), where it needs the partition
    (no_room's line when it does not)."""
    why, node, gone = seen.why, seen.node, dict(seen.gone)
    if gone:
        why, node = NODE, sorted(gone)[0]
    # Before any rank trained, a failure is most likely the code's own, except a step Slurm refused
    # to start and a node that preflight or the network check found wanting.
    if not gone and why not in (PREFLIGHT, SLOW) and not seen.trained and not seen.refused:
        return Decision(False, why, node, tuple(failures), said="no rank had begun training (train.heartbeat): not"
                        " retrying a failure that would most likely happen again")
    counted = (*failures, Failure(why, node))
    where = f" on {node}" if node else ""
    if len(counted) > max_failures:
        return Decision(False, why, node, counted,
                        said=f"failure {len(counted)} ({why}{where}): no retry left (--max-failures {max_failures})")
    exclude = sorted(set(excluded) | set(to_exclude(list(counted), list(gone))))
    new = [n for n in exclude if n not in excluded]
    reasons = tuple(f"{n} ({gone[n]})" if n in gone else f"{n} ({why})" if n == node and why in NODE_LEVEL
                    else f"{n} (2nd failure there)" for n in new)
    return Decision(True, why, node, counted, tuple(exclude), reasons)


def no_room(decision: Decision) -> str:
    """The log's line where the partition cannot hold the layout without the nodes left out."""
    return (f"failure {decision.count} ({decision.why}{decision.where}); without {','.join(decision.exclude)} the"
            " partition cannot hold the layout any more: not retrying")


def spare_line(decision: Decision, max_failures: int, swaps: list, gone: dict) -> str:
    """The log's line for a restart inside the allocation, each blamed node swapped for a spare."""
    said = "".join(f"; {old} ({gone.get(old, decision.why)}) replaced by spare {new}" for old, new in swaps)
    return (f"failure {decision.count} of at most {max_failures} ({decision.why}{decision.where}): restarting every"
            f" component inside the allocation from the newest checkpoint{said}")


def retry_line(decision: Decision, max_failures: int, action: str) -> str:
    """The log's line for a retry: "failure 2 of at most 2 (crash on node3): ACTION; excluding node3 (...)"."""
    left_out = f"; excluding {', '.join(decision.reasons)}" if decision.reasons else ""
    return f"failure {decision.count} of at most {max_failures} ({decision.why}{decision.where}): {action}{left_out}"
