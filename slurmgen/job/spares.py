"""Spare nodes (--spares): where each component's ranks run, and a lost or blamed node replaced by an
idle one of the same allocation, so that a retry needs no requeue. Pure: the runtime gives it the
nodes of each het group (the spares' group last) and the nodes to replace.

A component runs as one srun per het group it has nodes in: its own nodes that are left, then the
spares it took. Node ranks are handed out in that order (Slurm numbers a step's nodes in the
allocation's order, and the launch line adds SLURM_NODEID to the part's first node rank). A resumed
rank is the same rank wherever it runs: it reads its own state from the checkpoint, so which node
holds it may change at a restart.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class Part:
    """One srun of a component: nodes of one het group, their first node rank and global rank."""
    group: int
    nodes: tuple[str, ...]
    first_node: int
    first_rank: int

    def args(self) -> list[str]:
        """The launch function's arguments: GROUP NODES FIRST_NODE_RANK FIRST_RANK NODELIST."""
        return [str(self.group), str(len(self.nodes)), str(self.first_node), str(self.first_rank), ",".join(self.nodes)]


class Placement:
    def __init__(self, layout: list[tuple[int, int]], groups: list[list[str]]):
        """layout: (GPUs per node, nodes) per component; groups: each het group's nodes in the
        allocation's order, the spares' group last."""
        self.layout = layout
        self.order = {node: i for i, node in enumerate(n for g in groups for n in g)}
        self.spare_group = len(layout)
        self.held = [[(i, n) for n in groups[i]] for i in range(len(layout))]  # (group, node) per component
        self.free = list(groups[self.spare_group]) if len(groups) > len(layout) else []

    def nodes(self) -> list[str]:
        """Every node that runs ranks now."""
        return [n for held in self.held for _, n in held]

    def parts(self, i: int) -> list[Part]:
        gpus = self.layout[i][0]
        node_offset = sum(n for _, n in self.layout[:i])
        rank_offset = sum(g * n for g, n in self.layout[:i])
        out, done = [], 0
        for group in sorted({g for g, _ in self.held[i]}, key=lambda g: g == self.spare_group):
            nodes = tuple(n for g, n in self.held[i] if g == group)
            out.append(Part(group, nodes, node_offset + done, rank_offset + done * gpus))
            done += len(nodes)
        return out

    def replace(self, bad: set[str]) -> Optional[list[tuple[str, str]]]:
        """Each bad node that runs ranks swapped for a free spare (bad spares dropped first):
        (old, new) pairs, or None (nothing changed) when the spares left are too few."""
        self.free = [n for n in self.free if n not in bad]
        gone = [(i, n) for i, held in enumerate(self.held) for _, n in held if n in bad]
        if len(gone) > len(self.free):
            return None
        swaps = []
        for (i, node), spare in zip(gone, list(self.free)):
            self.free.remove(spare)
            self.held[i] = sorted([(g, n) for g, n in self.held[i] if n != node] + [(self.spare_group, spare)],
                                  key=lambda gn: (gn[0] == self.spare_group, self.order[gn[1]]))
            swaps.append((node, spare))
        return swaps

    def dump_groups(self) -> list[tuple[str, int, str]]:
        """Where the hang watch asks for stacks: (het group, nodes, node list) per part."""
        return [(str(p.group), len(p.nodes), ",".join(p.nodes)) for i in range(len(self.layout)) for p in self.parts(i)]
