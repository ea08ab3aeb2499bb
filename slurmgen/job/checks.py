"""The job runtime's look at the nodes, a collaborator that runs the checks and returns what it found;
the runtime (runtime.py) decides what follows. Before training: every node's software compared
(preflight.py, node_report.py), then every node's links timed (net_check.py, net_measure.py). While
training: the straggler watch (stragglers.py) names ranks far slower than the others."""

from __future__ import annotations

import subprocess
import sys
import time
from typing import Callable, Optional

from slurmgen import __version__
from slurmgen.job import net_check, preflight
from slurmgen.job.record import RunRecord
from slurmgen.job.states import Job


def budget(nodes: int) -> float:
    """Seconds a check before training may take (a minute and a half a second per node: 4.7 s for the
    preflight of 128 nodes here): past it, an srun stuck on a node that does not answer must not hold
    the job before any watch starts. A check that cannot answer lets training start: a failing
    check of a healthy cluster would itself be a misfire."""
    return 60.0 + 0.5 * nodes


class NodeChecks:
    def __init__(self, job: Job, steps, clock: Callable[[], float], straggler_check: Optional[Callable] = None,
                 sleep: Callable[[float], None] = time.sleep):
        self.job, self.steps, self.clock, self.sleep = job, steps, clock, sleep
        self.straggler_check = straggler_check  # (beats) -> ([stragglers.Straggler], {node: compute seconds})

    def preflight(self) -> preflight.Verdict:
        """Every node's report, compared; its lines are in the job log."""
        began, path = self.clock(), self.job.files.preflight
        if not self._on_every_node("preflight_step", path, [[str(i)] for i in range(len(self.groups))]):
            return preflight.Verdict(True, [], precision="")  # said: not checked, not failed
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
        if not self._on_every_node("net_check_step", path,
                                   [[str(i), str(sum(groups[:i])), str(self.nodes)] for i in range(len(groups))]):
            return net_check.Verdict([])
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

    def _on_every_node(self, function: str, path, args_per_group: list[list[str]]) -> bool:
        """One step of FUNCTION per het group at once, every node's line appended to PATH (O_APPEND: each
        node's one write lands whole), until all have ended (True), or the budget is spent (False: they
        are stopped)."""
        path.write_text("")
        deadline = self.clock() + budget(self.nodes)
        with open(path, "a") as log:
            procs = [self.steps.start(function, *args, stdout=log) for args in args_per_group]
            while any(p.poll() is None for p in procs) and self.clock() < deadline:
                self.sleep(0.2)
        late = [p for p in procs if p.poll() is None]
        if late:
            say(f"slurmgen: {function.replace('_step', '').replace('_', ' ')}: not every node answered within"
                f" {budget(self.nodes):.0f} s; training starts without it")
        for proc in late:  # srun cancels its step at a TERM; KILL where it does not answer
            proc.terminate()
        for proc in late:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
        return not late

    @property
    def groups(self) -> list[int]:
        """Nodes per het group: the components', then the spares' where there are any."""
        return [n for n, _ in self.job.spec.groups]

    @property
    def nodes(self) -> int:
        return sum(self.groups)


def say(text: str, err: bool = False) -> None:
    print(text, file=sys.stderr if err else sys.stdout, flush=True)
