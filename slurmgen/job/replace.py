"""The job runtime with spare nodes (--spares): a failed run restarts inside the allocation, the node
to blame replaced by an idle spare, with no requeue and no wait in the queue. Which node is to
blame: one Slurm marks bad, one that does not start a step when asked (its slurmd is gone: Slurm
itself notices only after SlurmdTimeout, often minutes), the node a crash began on or a hang points
at, and the nodes a retry without spares would exclude. With no spare left, the job is requeued
without those nodes, as without spares."""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass
from typing import Optional

from slurmgen import contract
from slurmgen.job import retry
from slurmgen.job.record import NODE, RunRecord
from slurmgen.job.runtime import Runtime, say
from slurmgen.job.spares import Placement
from slurmgen.job.states import Run, State

PROBE_SECONDS = 10  # a node that has not started a probe step by then counts as lost
STOP_SECONDS = 5  # TERM to the old steps' tasks, then KILL: a step with a lost node never ends by itself


FAILED = "no step started"


@dataclass
class Probe:
    began: float
    proc: object  # the probe's srun
    crossed: bool = False  # still running when the runtime signalled the job's steps


def _answers(probes: dict, clock, sleep) -> dict:
    """Each probed node's answer: "" (it started the step), FAILED, or no answer in PROBE_SECONDS."""
    answers = {}
    for node, probe in probes.items():
        while probe.proc.poll() is None and clock() < probe.began + PROBE_SECONDS:
            sleep(0.2)
        if probe.proc.poll() is None:
            probe.proc.kill()
            answers[node] = f"no step started in {PROBE_SECONDS} s"
        else:
            answers[node] = FAILED if probe.proc.poll() != 0 else ""
    return answers


class SpareRuntime(Runtime):
    def __init__(self, spec, steps, placement: Placement, **kwargs):
        super().__init__(spec, steps, **kwargs)
        self.placement = placement
        self.probes: dict = {}
        self.beats_name = os.environ.get(contract.NODE_BEATS_ENV, "")
        self.batch_node = os.environ.get("SLURMD_NODENAME", "")  # this process's: component 0's first node

    def _start(self) -> list:
        """One step per part of each component (its own nodes, the spares it took)."""
        return [(c.name, ",".join(part.nodes), self.steps.start(c.launch, *part.args()))
                for i, c in enumerate(self.spec.components) for part in self.placement.parts(i)]

    def _enter(self, state: State) -> None:
        if state == State.FAILING and not self.probes:  # asked now, read when the run has ended
            self.probes = self._probe()
        super()._enter(state)

    def _probe(self, nodes: Optional[list] = None) -> dict:
        """A step of nothing on every node that holds ranks or may (or on NODES): started at once, one
        per node."""
        held = {n: g for i in range(len(self.spec.components)) for g, n in self.placement.held[i]}
        held.update({n: self.placement.spare_group for n in self.placement.free})
        began = self.clock()
        return {node: Probe(began, self.steps.start("probe_step", str(group), node))
                for node, group in held.items() if nodes is None or node in nodes}

    def _lost(self) -> dict:
        """Nodes whose probe failed, or did not answer within PROBE_SECONDS: node -> why. A probe that
        failed after the runtime signalled the job's steps was most likely cancelled by that signal
        (scancel reaches every step of the job, probes included): its node is asked again, now that
        no stop is under way, and judged by that answer."""
        lost = _answers(self.probes, self.clock, self.sleep)
        again = [node for node, why in lost.items() if why == FAILED and self.probes[node].crossed]
        if again:
            say(f"slurmgen: probing {','.join(again)} again: the stop of the old steps may have cancelled the first probe")
            lost.update(_answers(self._probe(again), self.clock, self.sleep))
        self.probes = {}
        return {node: why for node, why in lost.items() if why}

    def _warned(self):
        """25.11 signals the batch script when a node is lost: with spares that is a failure to
        recover from here, not a warning (the stop file goes, the ranks must not stop at it)."""
        if not self.slurm.bad_nodes(self.placement.nodes()):
            return super()._warned()
        self.files.stop.unlink(missing_ok=True)
        self.run.why, self.run.status, self.run.failed_at = NODE, 1, self.clock() - self.spec.settle
        self._enter(State.FAILING)
        return None

    def _leave_out_slow(self, slow: list[str]):
        """A slow node named before training: swapped for a spare (a slow spare just dropped), or as
        without spares when too few are left."""
        swaps = self._swap(set(slow))
        if swaps is None:
            return super()._leave_out_slow(slow)
        self.record.open_run = self.nodes
        if self.record.runs:
            self.record.runs[-1].nodes = self.nodes
        for old, new in swaps:
            say(f"slurmgen: {old} replaced by spare {new} before training")
        for spare in sorted(set(slow) - {old for old, _ in swaps}):
            say(f"slurmgen: spare {spare} is slow: left idle for good")
        return None

    def _can_leave_out(self, node: str) -> bool:
        free = len(self.record.failures) < self.spec.max_failures and self.placement.free
        return bool(free and node in self.placement.nodes() and node != self.batch_node) or super()._can_leave_out(node)

    def _stop_steps(self, wait: float = STOP_SECONDS) -> None:
        for probe in self.probes.values():  # the stop's signal reaches them too: see _lost
            probe.crossed = probe.crossed or probe.proc.poll() is None
        super()._stop_steps(min(wait, STOP_SECONDS))  # sooner: the spare's launch waits for the old steps to end

    def _failed(self, status: int) -> int:
        judged = self._judge(self.run.why, self.run.suspect, self._lost())
        if judged is None:
            return self._finish(State.FAILED, status)
        why, node, gone, _ = judged
        bad = set(retry.to_exclude(self.record.failures, list(gone))) | ({node} if node else set())
        swaps = self._swap(bad)
        count, where = len(self.record.failures), f" on {node}" if node else ""
        if swaps is None:
            said = f"{self.batch_node} runs the batch script and the rendezvous, which no spare can take over" \
                if self.batch_node in bad else "no spare node left"
            say(f"slurmgen: failure {count} ({why}{where}): {said}; requeueing instead")
            return self._finish(State.REQUEUED, 0) if self._requeue_without(*judged) else self._finish(State.FAILED, status)
        said = "".join(f"; {old} ({gone.get(old, why)}) replaced by spare {new}" for old, new in swaps)
        say(f"slurmgen: failure {count} of at most {self.spec.max_failures} ({why}{where}): restarting every"
            f" component inside the allocation from the newest checkpoint{said}")
        return self._relaunch()

    def _swap(self, bad: set) -> Optional[list]:
        """The bad nodes that run ranks swapped for spares, and out of the job for good (bad spares
        dropped): (old, new) pairs; None, nothing changed, when the batch node is among them (its rank
        0 hosts the rendezvous, and Slurm ends the job with it) or too few spares are left."""
        swaps = None if self.batch_node in bad else self.placement.replace(bad)
        if swaps:
            replaced = {old for old, _ in swaps}
            self.record.excluded = sorted(set(self.record.excluded) | replaced)
            self.nodes = [n for n in self.nodes if n not in replaced]  # not the job's any more: a later warning is no loss
        return swaps

    def _relaunch(self) -> int:
        """The components again, on the placement as it is now: a fresh run of the same allocation."""
        self.record.open_run = self.nodes
        if self.record.runs:  # one run per start of the components, as `slurmgen report` counts them
            self.record.runs[-1].ended, self.record.runs[-1].state = time.time(), "restarted"
        self.record.runs.append(RunRecord(time.time(), self.nodes))
        self.run = Run()
        self.files.outcome.unlink(missing_ok=True)
        self.files.stop.unlink(missing_ok=True)  # made to stop the last run for a straggler
        shutil.rmtree(self.files.beats, ignore_errors=True)
        if self.beats_name:  # the old ranks' node-local beats must not be published as the new ones'
            os.environ[contract.NODE_BEATS_ENV] = f"{self.beats_name}-{len(self.record.failures)}"
        self._enter(State.TRAINING)
        self.run.steps = self._start()
        return self._watch()
