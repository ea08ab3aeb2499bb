"""The memory `slurmgen fit` judges against: the GPUs' (--gpu-mem, card sizes as sold) and the
hosts' (--mem, --mem-per-gpu, or RealMemory as Slurm reports it), per node.

GPU sizes. A card is sold by a round size in GB ("80 GB") and reports a little less to CUDA: an
80 GB H100 has 81,559 MiB (79.6 GiB), an A100 80 GB 81,920 MiB, an RTX 4090 24,564 MiB. The rule:
a size in G, GB or T names the card as sold, and fit counts 0.5% less than that many GiB
(80G -> 79.6 GiB, 48G -> 47.8, 24G -> 23.9); a size in GiB or M (MiB, as nvidia-smi prints it) is
taken as it is (`--gpu-mem 45GiB` for an L40S, which reports 46,068 MiB of its 48 GB).

Host memory. --mem and --mem-per-gpu are Slurm's sizes (G = GiB). Without them, fit asks the
cluster for RealMemory (sinfo, as `slurmgen check` does) of the nodes that could take each node
of the layout: the exact hosts with --nodelist, else the smallest among the partition's usable
nodes with enough GPUs. A node the cluster cannot tell about stays unchecked (None).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from slurmgen.plan.words import SpecError, per_node

SOLD = 0.995  # what a card reports to CUDA, of its size as sold (H100 80 GB: 81,559 / 81,920 MiB)
_GPU_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*(G|GB|T|TB|GIB|TIB|M|MB|MIB)?", re.I)
_EXACT = {"GIB": 1.0, "TIB": 1024.0, "M": 1 / 1024, "MB": 1 / 1024, "MIB": 1 / 1024}
_AS_SOLD = {"": 1.0, "G": 1.0, "GB": 1.0, "T": 1000.0, "TB": 1000.0}


def gpu_sizes(text: str, nodes: int) -> tuple[float, ...]:
    """--gpu-mem ('80G', or one per node like '24G,24G,80G,80G') -> GiB a card holds, per node."""
    parts = [p.strip() for p in str(text).split(",")]
    values = []
    for part in parts:
        m = _GPU_SIZE.fullmatch(part)
        if not m or float(m.group(1)) <= 0:
            raise SpecError(f"--gpu-mem {text!r}: {part!r} is not a size like 80G (one for every node, or one per node)")
        unit = (m.group(2) or "").upper()
        size = float(m.group(1))
        values.append(size * _EXACT[unit] if unit in _EXACT else size * _AS_SOLD[unit] * SOLD)
    if len(values) == 1:
        values *= nodes
    if len(values) != nodes:
        raise SpecError(f"--gpu-mem {text!r}: {len(values)} sizes for {nodes} nodes; give one, or one per node")
    return tuple(round(v, 2) for v in values)


@dataclass(frozen=True)
class HostBudget:
    gib: tuple[Optional[float], ...]  # per node; None where unknown
    source: str  # where the figures come from, for the header line; "" when nothing is known

    @property
    def checked(self) -> bool:
        return all(g is not None for g in self.gib)


def from_request(spec) -> Optional[HostBudget]:
    """GiB per node the job asks for (--mem-per-gpu, --mem); None when it asks for neither."""
    from slurmgen.site.check import memory_mb

    if spec.mem_per_gpu and memory_mb(spec.mem_per_gpu):
        return HostBudget(tuple(memory_mb(spec.mem_per_gpu) * n / 1024 for n in spec.gpus), "--mem-per-gpu")
    if spec.mem and memory_mb(spec.mem):
        return HostBudget(tuple(memory_mb(spec.mem) / 1024 for _ in spec.gpus), "--mem")
    return None


def from_cluster(gpus: tuple[int, ...], nodes, partition: Optional[str], default_partition: str,
                 nodelist: tuple[str, ...] = ()) -> HostBudget:
    """RealMemory per node of the layout, from the cluster's node list (cluster.Node); partition: one
    for all nodes, or one per node (--partition small,small,big,big)."""
    parts = per_node(partition, len(gpus))
    usable = [n for n in nodes if n.usable and n.memory_mb > 0]
    found: list[Optional[float]] = []
    for i, count in enumerate(gpus):
        if nodelist:
            named = [n for n in nodes if n.name == nodelist[i] and n.memory_mb > 0]
            found.append(named[0].memory_mb / 1024 if named else None)
            continue
        part = parts[i] or default_partition
        able = [n.memory_mb for n in usable if n.gpus >= count and (not part or n.partition == part)]
        found.append(min(able) / 1024 if able else None)
    return HostBudget(tuple(found), "RealMemory (sinfo)" if any(f is not None for f in found) else "")


def host_budget(spec, ask=None) -> HostBudget:
    """The job's request, else what the cluster says its nodes have (ask: cluster.query, for tests)."""
    requested = from_request(spec)
    if requested:
        return requested
    from slurmgen.site import cluster

    try:
        info = (ask or cluster.query)()
    except cluster.ClusterError:
        return HostBudget(tuple(None for _ in spec.gpus), "")
    return from_cluster(spec.gpus, info.nodes, spec.partition, info.default_partition, tuple(spec.nodelist))
