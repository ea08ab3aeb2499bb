"""What the cluster has: nodes, partitions, GPU GRES and state, from sinfo. I/O only, no judgement."""

from __future__ import annotations

import re

from slurmgen.frozen_records import frozen

UNUSABLE = ("down", "drain", "fail", "inval", "maint", "unknown", "future", "power")


@frozen
class Node:
    """One node as sinfo describes it."""

    name: str
    partition: str
    gpus: int
    state: str
    cpus: int
    reason: str = ""
    memory_mb: int = 0  # RealMemory; 0 when unknown
    features: tuple[str, ...] = ()  # AVAIL_FEATURES (--constraint)

    @property
    def usable(self) -> bool:
        """Can take work now or once busy jobs end (drained and down nodes cannot)."""
        return not self.state.endswith("*") and not any(self.state.startswith(s) for s in UNUSABLE)


@frozen
class ClusterInfo:
    """What the cluster says: its Slurm release, default partition and nodes."""

    version: str
    default_partition: str
    nodes: tuple[Node, ...]

    @property
    def partitions(self) -> list[str]:
        return sorted({n.partition for n in self.nodes})


class ClusterError(RuntimeError):
    """Slurm could not be asked (no sinfo, no controller)."""


def gpu_count(gres: str) -> int:
    """'gpu:2', 'gpu:a100:4(S:0-1)', 'gpu:1,shard:8' -> GPU count."""
    total = 0
    for item in gres.split(","):
        item = re.sub(r"\(.*?\)", "", item)
        parts = item.split(":")
        if parts[0] == "gpu" and len(parts) >= 2 and parts[-1].isdigit():
            total += int(parts[-1])
    return total


# What sinfo is asked for, one line a node (and partition); the features last, so that older
# seven-field lines still read.
SINFO_FORMAT = "%N|%P|%G|%T|%c|%E|%m|%f"


def parse_sinfo(text: str) -> tuple[str, list[Node]]:
    """Lines of `sinfo -h -N -o SINFO_FORMAT` -> (default partition, nodes)."""
    default = ""
    nodes = []
    for line in text.splitlines():
        if not line.strip():
            continue
        name, partition, gres, state, cpus, reason, memory, features = (line.split("|", 7) + [""] * 8)[:8]
        if partition.endswith("*"):
            partition = partition[:-1]
            default = partition
        nodes.append(Node(name=name, partition=partition, gpus=gpu_count(gres), state=state,
                          cpus=int(cpus) if cpus.isdigit() else 0,
                          reason="" if reason in ("none", "(null)") else reason,
                          memory_mb=int(memory) if memory.isdigit() else 0,
                          features=tuple(f for f in features.strip().split(",") if f and f != "(null)")))
    return default, nodes


def _run(cmd: list[str]) -> str:
    import subprocess  # here: a render, which never runs this, imports none (issue 43)

    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    except FileNotFoundError:
        raise ClusterError(f"{cmd[0]} not found: is this a Slurm login node?") from None
    except subprocess.TimeoutExpired:
        raise ClusterError(f"{' '.join(cmd)} did not answer within 30 s") from None
    if proc.returncode != 0:
        detail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise ClusterError(f"{' '.join(cmd)} failed: {detail}")
    return proc.stdout


def query() -> ClusterInfo:
    version = _run(["sinfo", "--version"]).strip()
    default, nodes = parse_sinfo(_run(["sinfo", "-h", "-N", "-o", SINFO_FORMAT]))
    return ClusterInfo(version=version, default_partition=default, nodes=tuple(nodes))
