"""The job runtime's look at the nodes, a part of Runtime (runtime.py). Before training: every node's
software compared (preflight.py), then every node's links timed (net_check.py); a node that
differs or is slow is left out: the job is requeued without it (with --spares, replace.py swaps it
for a spare instead). While training: the straggler watch (stragglers.py) names ranks far slower
than the others, and with --straggler-action exclude stops the run at a checkpoint to go on
without their node, where a spare or the partition allows."""

from __future__ import annotations

import os
import sys
from typing import Optional

from slurmgen import __version__, contract
from slurmgen.job import net_check, preflight
from slurmgen.job.record import PREFLIGHT, SLOW
from slurmgen.job.states import State


class Checks:
    def _preflight(self) -> Optional[int]:
        """None when training may start, else the job's exit status."""
        self._enter(State.PREFLIGHT)
        began = self.clock()
        self._on_every_node("preflight_step", self.files.preflight, [[str(i)] for i in range(len(self._groups()))])
        nodes = self._node_count()
        needs = getattr(self.spec.preflight, "slurmgen", False)  # the ranks import slurmgen: the runtime's own
        found = preflight.verdict(preflight.read_reports(self.files.preflight), nodes, __version__ if needs else "")
        for line in found.lines + [f"slurmgen: preflight of {nodes} node(s) took {self.clock() - began:.1f} s"]:
            say(line)
        if not found.passed:
            if found.culprit and self._retry(PREFLIGHT, found.culprit):
                return self._finish(State.REQUEUED, 0)
            return self._finish(State.FAILED, 1)
        if found.precision:  # one dtype for every rank: bf16 only where every GPU has it
            os.environ[contract.PRECISION_ENV] = found.precision
        self.files.preflight.unlink(missing_ok=True)
        return None

    def _net_check(self) -> Optional[int]:
        """Every node's links timed (net_measure.py): None when training may start, else the job's exit status."""
        self._enter(State.PREFLIGHT)
        began, nodes, path = self.clock(), self._node_count(), self.files.folder / "net-check.log"
        groups = self._groups()  # each group's first rank: the nodes before it
        self._on_every_node("net_check_step", path,
                            [[str(i), str(sum(groups[:i])), str(nodes)] for i in range(len(groups))])
        ratio, floor = self.spec.net_check
        reports = preflight.read_reports(path, net_check.TAG)
        found = net_check.verdict(reports, nodes, ratio, floor, self.clock() - began)
        for line in found.lines:
            say(line)
        if self.record.runs:
            self.record.runs[-1].network = {f.host: [f.send_gbps, f.receive_gbps, f.latency_ms] for f in found.figures}
        path.unlink(missing_ok=True)
        return self._leave_out_slow(found.slow) if found.slow else None

    def _leave_out_slow(self, slow: list[str]) -> Optional[int]:
        """A slow node named before training: requeued without it, or trained on when that cannot be."""
        if self._retry(SLOW, slow[0]):
            return self._finish(State.REQUEUED, 0)
        say(f"slurmgen: training on {slow[0]} all the same")
        return None

    def _stragglers(self, beats: dict) -> None:
        """Each straggler named once a run; exclude: the first whose node can be done without stops the run."""
        rule = self.spec.stragglers
        named, compute = self.straggler_check(beats=beats)
        if self.record.runs and compute:  # saved with the run's next state (not a write per look)
            self.record.runs[-1].compute = {host: round(seconds, 6) for host, seconds in compute.items()}
        for found in named:
            if found.rank in self.run.stragglers:
                continue
            self.run.stragglers.add(found.rank)
            say(found.line(rule.window))
            if self.record.runs:
                seen = self.record.runs[-1].stragglers
                seen[found.host] = max(seen.get(found.host, 0.0), round(found.ratio, 2))
            if rule.action == "exclude" and not self.run.leave_out:
                if not self._can_leave_out(found.host):
                    say(f"slurmgen: straggler: training on with {found.host}: no spare left, no failure left to"
                        " count, or the partition cannot hold the layout without it")
                    continue
                say(f"slurmgen: straggler: asking every rank to checkpoint, to go on without {found.host}")
                self.run.leave_out, self.run.warned_at = found.host, self.clock()
                self.files.stop.touch()
                self._enter(State.CHECKPOINTING)
            self._save()

    def _can_leave_out(self, node: str) -> bool:
        """Whether a retry without node may run: a failure left to count, and the layout fits without it."""
        if len(self.record.failures) >= self.spec.max_failures:
            return False
        info = self.slurm.job_info(self.spec.job)
        return self.slurm.fits_without(self.spec.layout, info.partition,
                                       sorted(set(info.user_excluded) | set(self.record.excluded) | {node}))

    def _on_every_node(self, function: str, path, args_per_group: list[list[str]]) -> None:
        """One step of FUNCTION per het group at once, every node's line appended to PATH (O_APPEND: each
        node's one write lands whole), until all have ended."""
        path.write_text("")
        with open(path, "a") as log:
            procs = [self.steps.start(function, *args, stdout=log) for args in args_per_group]
            for proc in procs:
                proc.wait()

    def _groups(self) -> list[int]:
        """Nodes per het group: the components', then the spares' where there are any."""
        return [c.nodes for c in self.spec.components] + ([self.spec.spares] if self.spec.spares else [])

    def _node_count(self) -> int:
        return sum(self._groups())


def say(text: str, err: bool = False) -> None:
    print(text, file=sys.stderr if err else sys.stdout, flush=True)
