"""Spare nodes (--spares), the job runtime's collaborator: where each component's ranks run now
(spares.Placement), which nodes are lost, and a blamed or lost node swapped for an idle spare of the
allocation, so that a failed run restarts inside it with no requeue and no wait in the queue. A node
is lost when it does not start a step when asked (its slurmd is gone: Slurm itself notices only after
SlurmdTimeout, often minutes). The runtime (runtime.py) asks; it decides what follows."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

from slurmgen.job.checks import say
from slurmgen.job.spares import Part, Placement

PROBE_SECONDS = 10  # a node that has not started a probe step by then counts as lost
STOP_SECONDS = 5  # TERM to the old steps' tasks, then KILL: a step with a lost node never ends by itself
FAILED = "no step started"


@dataclass
class Probe:
    began: float
    proc: object  # the probe's srun
    crossed: bool = False  # still running when the runtime signalled the job's steps


class Spares:
    def __init__(self, placement: Placement, steps, clock: Callable[[], float], sleep: Callable[[float], None],
                 batch_node: str = ""):
        self.placement, self.steps, self.clock, self.sleep = placement, steps, clock, sleep
        self.batch_node = batch_node  # this process's: component 0's first node, which Slurm ends the job with
        self.probes: dict = {}

    def parts(self, component: int) -> list[Part]:
        return self.placement.parts(component)

    def nodes(self) -> list[str]:
        """Every node that runs ranks now."""
        return self.placement.nodes()

    def probe(self, nodes: Optional[list] = None) -> None:
        """A step of nothing on every node that holds ranks or may (or on NODES): started at once, one
        per node, read when the run has ended (lost)."""
        if self.probes and nodes is None:
            return
        held = {n: g for i in range(len(self.placement.layout)) for g, n in self.placement.held[i]}
        held.update({n: self.placement.spare_group for n in self.placement.free})
        began = self.clock()
        self.probes.update({node: Probe(began, self.steps.start("probe_step", str(group), node))
                            for node, group in held.items() if nodes is None or node in nodes})

    def stopping(self) -> None:
        """The runtime signals the job's steps: probes still running may be cancelled by it."""
        for probe in self.probes.values():
            probe.crossed = probe.crossed or probe.proc.poll() is None

    def lost(self) -> dict:
        """Nodes whose probe failed, or did not answer within PROBE_SECONDS: node -> why. A probe that
        failed after the runtime signalled the job's steps was most likely cancelled by that signal
        (scancel reaches every step of the job, probes included): its node is asked again, now that
        no stop is under way, and judged by that answer."""
        answers = self._answers()
        again = [node for node, why in answers.items() if why == FAILED and self.probes[node].crossed]
        if again:
            say(f"slurmgen: probing {','.join(again)} again: the stop of the old steps may have cancelled the first probe")
            self.probes = {}
            self.probe(again)
            answers.update(self._answers())
        self.probes = {}
        return {node: why for node, why in answers.items() if why}

    def _answers(self) -> dict:
        """Each probed node's answer: "" (it started the step), FAILED, or no answer in PROBE_SECONDS."""
        answers = {}
        for node, probe in self.probes.items():
            while probe.proc.poll() is None and self.clock() < probe.began + PROBE_SECONDS:
                self.sleep(0.2)
            if probe.proc.poll() is None:
                probe.proc.kill()
                answers[node] = f"no step started in {PROBE_SECONDS} s"
            else:
                answers[node] = FAILED if probe.proc.poll() != 0 else ""
        return answers

    def swap(self, bad: set) -> Optional[list]:
        """The bad nodes that run ranks swapped for spares, and out of the job for good (bad spares
        dropped): (old, new) pairs; None, nothing changed, when the batch node is among them (its rank
        0 hosts the rendezvous, and Slurm ends the job with it) or too few spares are left."""
        return None if self.batch_node in bad else self.placement.replace(bad)

    def can_replace(self, node: str) -> bool:
        """Whether a spare is free for this node, which runs ranks and is not the batch node."""
        return bool(self.placement.free) and node in self.placement.nodes() and node != self.batch_node

    def why_not(self, bad: set) -> str:
        return (f"{self.batch_node} runs the batch script and the rendezvous, which no spare can take over"
                if self.batch_node in bad else "no spare node left")
