"""The job runtime's look at the nodes, a collaborator that runs the checks and returns what it found;
the runtime (runtime.py) decides what follows. Before training: every node's software compared
(preflight.py, node_report.py), then every node's links timed (net_check.py, net_measure.py). While
training: the straggler watch (stragglers.py) names ranks far slower than the others."""

from __future__ import annotations

import sys
from typing import Callable, Optional

from slurmgen import __version__
from slurmgen.job import net_check, preflight
from slurmgen.job.record import RunRecord
from slurmgen.job.states import Job


class NodeChecks:
    def __init__(self, job: Job, steps, clock: Callable[[], float], straggler_check: Optional[Callable] = None):
        self.job, self.steps, self.clock = job, steps, clock
        self.straggler_check = straggler_check  # (beats) -> ([stragglers.Straggler], {node: compute seconds})

    def preflight(self) -> preflight.Verdict:
        """Every node's report, compared; its lines are in the job log."""
        began, path = self.clock(), self.job.files.preflight
        self._on_every_node("preflight_step", path, [[str(i)] for i in range(len(self.groups))])
        needs = getattr(self.job.spec.preflight, "slurmgen", False)  # the ranks import slurmgen: the runtime's own
        found = preflight.verdict(preflight.read_reports(path), self.nodes, __version__ if needs else "")
        for line in found.lines + [f"slurmgen: preflight of {self.nodes} node(s) took {self.clock() - began:.1f} s"]:
            say(line)
        if found.passed:
            path.unlink(missing_ok=True)
        return found

    def net_check(self) -> net_check.Verdict:
        """Every node's links timed, and the slow ones named; its lines are in the job log."""
        began, path = self.clock(), self.job.files.folder / "net-check.log"
        groups = self.groups  # each group's first rank: the nodes before it
        self._on_every_node("net_check_step", path,
                            [[str(i), str(sum(groups[:i])), str(self.nodes)] for i in range(len(groups))])
        ratio, floor = self.job.spec.net_check
        found = net_check.verdict(preflight.read_reports(path, net_check.TAG), self.nodes, ratio, floor,
                                  self.clock() - began)
        for line in found.lines:
            say(line)
        path.unlink(missing_ok=True)
        return found

    def stragglers(self, beats: dict, run: RunRecord, named: set) -> list:
        """The ranks newly slow (each named once a run: named holds the ranks named before), said in the
        log; each node's compute time and each straggler's ratio kept in the run's record."""
        found, compute = self.straggler_check(beats=beats) if self.straggler_check else ([], {})
        if compute:  # saved with the run's next state (not a write per look)
            run.compute = {host: round(seconds, 6) for host, seconds in compute.items()}
        new = [f for f in found if f.rank not in named]
        for straggler in new:
            named.add(straggler.rank)
            say(straggler.line(self.job.spec.stragglers.window))
            run.stragglers[straggler.host] = max(run.stragglers.get(straggler.host, 0.0), round(straggler.ratio, 2))
        return new

    def _on_every_node(self, function: str, path, args_per_group: list[list[str]]) -> None:
        """One step of FUNCTION per het group at once, every node's line appended to PATH (O_APPEND: each
        node's one write lands whole), until all have ended."""
        path.write_text("")
        with open(path, "a") as log:
            procs = [self.steps.start(function, *args, stdout=log) for args in args_per_group]
            for proc in procs:
                proc.wait()

    @property
    def groups(self) -> list[int]:
        """Nodes per het group: the components', then the spares' where there are any."""
        return [n for n, _ in self.job.spec.groups]

    @property
    def nodes(self) -> int:
        return sum(self.groups)


def say(text: str, err: bool = False) -> None:
    print(text, file=sys.stderr if err else sys.stdout, flush=True)
