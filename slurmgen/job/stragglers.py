"""The straggler watch: from each rank's median compute time per step over the last WINDOW steps (in
its heartbeat, train.compute_time), the ranks far slower than the others. Synchronous training
runs at the slowest rank's pace, so one slow node slows the whole job, and its step times say
nothing (they are everyone's); the compute time is the rank's own."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from slurmgen.job.hangs import Beat


@dataclass(frozen=True)
class Straggler:
    rank: int
    host: str
    ratio: float  # its compute time over the median of the other ranks'

    def line(self, window: int) -> str:
        return (f"slurmgen: straggler: rank {self.rank} on {self.host}: {self.ratio:.1f}x the median compute time"
                f" per step over the last {window} steps")


def slow_ranks(beats: dict[int, Beat], ratio: float, kinds: dict[int, str] | None = None) -> list[Straggler]:
    """Ranks whose compute time is at least ratio times the median of the others' of the same kind of
    GPU (kinds: rank -> its --gpu-type; an H100 is not an A100's straggler); nothing until every rank
    with a beat has a full window (a figure), and nothing for a rank without a peer of its kind."""
    figures = {r: b.compute for r, b in beats.items()}
    if len(figures) < 2 or not all(figures.values()):
        return []
    kinds = kinds or {}
    found = []
    for r, mine in sorted(figures.items()):
        peers = [v for k, v in figures.items() if k != r and kinds.get(k, "") == kinds.get(r, "")]
        others = statistics.median(peers) if peers else 0
        if others > 0 and mine >= ratio * others:
            found.append(Straggler(r, beats[r].host, mine / others))
    return found


def rank_kinds(components) -> dict[int, str]:
    """Each global rank's GPU type, from the components (ranks follow them in order); {} where the job
    has one kind of GPU only."""
    if len({c.gpu_type for c in components}) < 2:
        return {}
    kinds, first = {}, 0
    for c in components:
        kinds.update({r: c.gpu_type for r in range(first, first + c.nodes * c.gpus)})
        first += c.nodes * c.gpus
    return kinds


def node_figures(beats: dict[int, Beat]) -> dict[str, float]:
    """Each node's compute time per step: the median of its ranks' (those with a figure)."""
    by_node: dict[str, list[float]] = {}
    for b in beats.values():
        if b.compute:
            by_node.setdefault(b.host, []).append(b.compute)
    return {host: statistics.median(values) for host, values in sorted(by_node.items())}


def look(ratio: float, beats: dict[int, Beat], kinds: dict[int, str] | None = None) -> tuple[list[Straggler], dict[str, float]]:
    """The stragglers now, and each node's compute time (for the job record and the report)."""
    return slow_ranks(beats, ratio, kinds), node_figures(beats)
