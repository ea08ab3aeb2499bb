"""Requests no node could ever satisfy, refused before anything is written: Slurm would hold such a
job pending forever. GPU counts above what any node has, a partition the cluster does not have, more
nodes than a partition has, a --constraint no node (or too few) of its partition satisfies. sinfo is
started at once and read last (render goes on meanwhile); where it is missing or does not answer,
counts are held to a stated ceiling and the rest is Slurm's to judge."""

from __future__ import annotations

from collections import Counter
from typing import Optional

from slurmgen.plan.words import SpecError, compact_gpus
from slurmgen.site import features
from slurmgen.site.child_process import Child
from slurmgen.site.cluster import SINFO_FORMAT, Node, parse_sinfo

# Where sinfo does not answer: more GPUs than any node has (8 GPUs of 7 MIG slices each is 56).
GPU_CEILING = 64
WAIT_SECONDS = 5  # a controller that is down makes sinfo wait far longer


class Asking:
    """sinfo, started now, read later; nodes() is None where it is missing or does not answer."""

    def __init__(self):
        self.default = ""  # the default partition, once nodes() read it
        try:
            # -a: hidden partitions too, which take jobs all the same (no partition refused for being hidden)
            self.sinfo: Optional[Child] = Child(["sinfo", "-a", "-h", "-N", "-o", SINFO_FORMAT])
        except OSError:
            self.sinfo = None

    def nodes(self) -> Optional[list[Node]]:
        out = None if self.sinfo is None else self.sinfo.finish(WAIT_SECONDS)
        if out is None:
            return None
        self.default, nodes = parse_sinfo(out.decode(errors="replace"))
        return nodes if self.sinfo.returncode == 0 and nodes else None


class NoAnswer:
    """No cluster to ask (submit --local): counts are held to the ceiling only."""

    default = ""

    def nodes(self) -> Optional[list[Node]]:
        return None


def check_gpus(spec, nodes: Optional[list[Node]]) -> None:
    """Raises SpecError for a node count of GPUs above what any node has (of --partition, where sinfo
    knows it; the partition itself is `check`'s to judge)."""
    layout, most_asked = compact_gpus(",".join(map(str, spec.gpus))), max(spec.gpus)
    if nodes is None:
        if most_asked > GPU_CEILING:
            raise SpecError(f"--gpus {layout!r}: {most_asked} GPUs on one node; slurmgen takes at most {GPU_CEILING}"
                            " (sinfo does not answer here to say what the nodes have)")
        return
    for partition in dict.fromkeys(spec.partitions):  # each node's count against its own partition
        asked = max(g for g, p in zip(spec.gpus, spec.partitions) if p == partition)
        members = [n for n in nodes if n.partition == partition] or nodes  # the partition itself: check_places
        where = f"partition {partition}" if members is not nodes else "this cluster"
        most = max(n.gpus for n in members)
        if asked > most:
            raise SpecError(f"--gpus {layout!r}: {asked} GPUs on one node, but no node of {where} has more than"
                            f" {most} (sinfo)")


def check_places(spec, nodes: Optional[list[Node]], default: str = "") -> None:
    """Raises SpecError for a partition sinfo does not list, more nodes than a partition has, or a
    --constraint that no node, or fewer nodes than asked, of its partition satisfies. default: the
    default partition, where the nodes of no --partition go."""
    if nodes is None:
        return
    partitions = sorted({n.partition for n in nodes})
    for partition, count in Counter(spec.partitions).items():
        if partition and partition not in partitions:
            raise SpecError(f"--partition {spec.partition!r}: no partition {partition!r} here; partitions:"
                            f" {', '.join(partitions)} (sinfo)")
        members, where = _members(nodes, partition, default)
        has = len({n.name for n in members})
        if count > has:
            option = f"--partition {spec.partition!r}" if spec.partition else f"--nodes {spec.nodes}"
            raise SpecError(f"{option}: {count} nodes in {where}, which has {has} (sinfo)")
    for (partition, constraint), count in Counter(zip(spec.partitions, spec.constraints)).items():
        if not features.judged_per_node(constraint):  # a100*2: that many nodes with it; Slurm's to judge
            continue
        members, where = _members(nodes, partition, default)
        able = {n.name for n in members if features.may_run_on(constraint, n.features)}
        if len(able) < count:
            have = ", ".join(sorted({f for n in members for f in n.features})) or "none"
            short = f"{count} nodes need {constraint!r} in {where}, which has {len(able)}" if able else \
                f"no node of {where} has {constraint!r}"
            raise SpecError(f"--constraint {spec.constraint!r}: {short}; features there: {have} (sinfo)")


def _members(nodes: list[Node], partition: str, default: str) -> tuple[list[Node], str]:
    """The nodes of a partition ("": the default one, else every node) and how a line names them."""
    name = partition or default
    if not name:
        return nodes, "this cluster"
    return [n for n in nodes if n.partition == name], f"partition {name}" + ("" if partition else " (the default)")
