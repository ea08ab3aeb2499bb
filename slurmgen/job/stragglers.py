"""The straggler watch: from each rank's mean compute time per step over the last WINDOW steps (in
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


def slow_ranks(beats: dict[int, Beat], ratio: float) -> list[Straggler]:
    """Ranks whose compute time is at least ratio times the median of the others'; nothing until
    every rank with a beat has a full window (a figure)."""
    figures = {r: b.compute for r, b in beats.items()}
    if len(figures) < 2 or not all(figures.values()):
        return []
    found = []
    for r, mine in sorted(figures.items()):
        others = statistics.median(v for k, v in figures.items() if k != r)
        if others > 0 and mine >= ratio * others:
            found.append(Straggler(r, beats[r].host, mine / others))
    return found


def node_figures(beats: dict[int, Beat]) -> dict[str, float]:
    """Each node's compute time per step: the median of its ranks' (those with a figure)."""
    by_node: dict[str, list[float]] = {}
    for b in beats.values():
        if b.compute:
            by_node.setdefault(b.host, []).append(b.compute)
    return {host: statistics.median(values) for host, values in sorted(by_node.items())}


def look(ratio: float, beats: dict[int, Beat]) -> tuple[list[Straggler], dict[str, float]]:
    """The stragglers now, and each node's compute time (for the job record and the report)."""
    return slow_ranks(beats, ratio), node_figures(beats)
