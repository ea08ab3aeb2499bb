"""Failures and bad nodes, decided: which node a crash began on, which nodes a retry leaves out, and
whether the layout still fits without them. Pure functions of what Slurm and the log say."""

from __future__ import annotations

import re
from collections import Counter

from slurmgen.job.record import NODE_LEVEL, Failure


def to_exclude(failures: list[Failure], bad_now: list[str]) -> list[str]:
    """Nodes a retry should avoid: bad in Slurm's eyes now, where a node-level failure pointed, or
    blamed for two failures (once may be the code, twice on one node is the node)."""
    blamed = Counter(f.node for f in failures if f.node and f.why not in NODE_LEVEL)
    node_failures = {f.node for f in failures if f.node and f.why in NODE_LEVEL}
    return sorted(set(bad_now) | node_failures | {n for n, count in blamed.items() if count >= 2})


def layout_fits(layout: list[tuple[int, int]], capacities: list[int]) -> bool:
    """Whether nodes with these GPU counts can hold the components (GPUs per node, nodes). Nodes
    with at least g GPUs are nested sets, so it is enough that for every g the nodes with >= g
    GPUs outnumber the component nodes that need >= g."""
    for g in {g for g, _ in layout}:
        need = sum(n for gg, n in layout if gg >= g)
        if sum(1 for c in capacities if c >= g) < need:
            return False
    return True


# torchrun's summary of a failed agent, and srun's line for a failed task.
_ROOT_CAUSE = re.compile(r"Root Cause \(first observed failure\):\s*\n\[\d+\]:\s*\n\s*time\s*:\s*(?P<time>\S+)\s*\n"
                         r"\s*host\s*:\s*(?P<host>\S+)\s*\n\s*rank\s*:.*\n\s*exitcode\s*:\s*(?P<code>-?\d+)")
_SRUN_TASK = re.compile(r"^srun: error: (?P<host>\S+): tasks? [\d,-]+: (?:Exited with exit code (?P<code>\d+)|.*)$", re.M)


# srun's lines for a step Slurm would not create, or whose tasks a node's slurmstepd could not start
# (25.11: "Slurmd could not execve job" when the task's cgroup, affinity or fork fails before exec).
_REFUSED = re.compile(r"^srun: error: (?:Unable to create step for job|task \d+ launch failed: "
                      r"|Task launch for \S+ failed on node |Application launch failed: )", re.M)
_LAUNCH_FAILED_ON = re.compile(r"^srun: error: Task launch for \S+ failed on node (?P<host>[^:\s]+): ", re.M)


def last_run(log: str) -> str:
    start = log.rfind("slurmgen: job ")
    return log[start:] if start >= 0 else log


def crashed_node(log: str) -> str:
    """The node where the last run's failure began, from the job log ("" when it cannot be told).

    When one rank crashes, the others fail too, from the broken collective: those exit with
    Python's status 1, while the rank that began it mostly does not (a signal, os._exit, an OOM
    kill). So: the earliest failure torchrun reports with another status, else the earliest; with
    --launcher srun, srun's first task that exited with another status than 1. Several nodes in the
    same second: none. The entry points' ranks that fail from a broken collective wait 8 s first
    (train.program.leave_after_the_culprit), so the node where it began is seen first."""
    log = last_run(log)
    launch = {m["host"] for m in _LAUNCH_FAILED_ON.finditer(log)}
    if launch:  # a node that could not start its tasks: the failure began there
        return launch.pop() if len(launch) == 1 else ""
    causes = [(m["time"], m["host"], m["code"]) for m in _ROOT_CAUSE.finditer(log)]
    if causes:
        odd = [c for c in causes if c[2] != "1"] or causes
        first = min(t for t, _, _ in odd)
        hosts = {h for t, h, _ in odd if t == first}
        return hosts.pop() if len(hosts) == 1 else ""
    tasks = [(m["host"], m["code"]) for m in _SRUN_TASK.finditer(log)]
    odd = [h for h, code in tasks if code not in (None, "1")]
    return odd[0] if odd else ""


def step_uncreated(log: str) -> bool:
    """Whether the controller refused to create a step of the last run ("Unable to create step for job")."""
    return "srun: error: Unable to create step for job" in last_run(log)


def step_refused(log: str) -> bool:
    """Whether Slurm refused to create a step of the last run ("srun: error: Unable to create step
    for job"; once seen with 22.05, "Invalid generic resource (gres) specification", for a step like
    many before and after it) or a node could not start its tasks ("task N launch failed", once seen
    with 25.11, "Slurmd could not execve job"): Slurm's doing, not the code's, so worth a retry even
    before any rank began."""
    return bool(_REFUSED.search(last_run(log)))
