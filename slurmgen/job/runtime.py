"""The job runtime: everything that decides inside a running job, in one loop over one set of states.

The generated batch script sources runtime.sh (whose path `python -m slurmgen.job.runtime --format`
prints, after the runtime spec format it speaks), which has the rendezvous found (prepare.py), writes
the launch functions to the job's folder and starts `python -m slurmgen.job` (command.py). From there this module runs the job: preflight and
its verdict, the components started and watched, fail-fast, the hang watch, the time-limit stop,
and the end: finished, requeued (a restart, or a retry after a failure, without the nodes to
blame), left to Slurm's preemption, or failed. What it must remember across runs is one
JobRecord (record.py). Slurm, the processes, the clock and the hang watch come in from outside,
so the whole state machine runs in unit tests without them. With --spares, replace.SpareRuntime
restarts a failed run inside the allocation instead of requeueing it.
"""

from __future__ import annotations

import os
import shutil
import socket
import time
from pathlib import Path
from typing import Callable, Optional

from slurmgen import contract
from slurmgen.job import hangs, retry, slurm
from slurmgen.job.checks import Checks, say
from slurmgen.job.record import CRASH, HANG, NODE, NODE_LEVEL, PREFLIGHT, SLOW, Failure, JobRecord, RunRecord
from slurmgen.job.states import JobSpec, Run, State

RUNTIME = Path(__file__).with_name("runtime.sh")
STOP_TASKS_SECONDS = 30  # TERM to a step's tasks, then KILL this much later (as Slurm's KillWait)
# After a hang, sooner: the hung rank cannot checkpoint, and the others, blocked in a collective with
# it, end within seconds of the TERM (train.stop's watch); the rest is lost time.
HUNG_STOP_SECONDS = 10
PREEMPTED_WAIT = 3600  # Slurm ends the job at its GraceTime and requeues it itself


class Runtime(Checks):
    def __init__(self, spec: JobSpec, steps, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep, hang_check: Optional[Callable] = None,
                 slurm_api=slurm, nodes: Optional[list[str]] = None, straggler_check: Optional[Callable] = None):
        self.spec, self.steps, self.clock, self.sleep = spec, steps, clock, sleep
        self.hang_check, self.slurm, self.nodes = hang_check, slurm_api, nodes or []
        self.straggler_check = straggler_check  # (beats) -> ([stragglers.Straggler], {node: compute seconds})
        self.files = spec.files
        self.record = JobRecord()
        self.run = Run()

    def main(self) -> int:
        """The batch script's exit status."""
        if self._outcome()[0] == contract.FINISHED:  # Slurm 25.11 may requeue a preempted job twice
            say("slurmgen: finished in an earlier run")
            return 0
        self.files.outcome.unlink(missing_ok=True)
        shutil.rmtree(self.files.beats, ignore_errors=True)
        self.record = JobRecord.load(self.files.record)
        say(f"slurmgen: job {self.spec.job} (restart {self.record.restarts} of at most {self.spec.max_restarts}) on "
            f"{socket.gethostname()}: world size {self.spec.world_size}, master {os.environ.get('MASTER_ADDR', '')}:"
            f"{os.environ.get('MASTER_PORT', '')}")
        if not self._begin():
            return self._finish(State.FAILED, 1)
        status = self._preflight() if self.spec.preflight else None
        if status is None and self.spec.net_check and self._node_count() > 1:
            status = self._net_check()
        if status is not None:
            return status
        self._enter(State.TRAINING)
        self.run.steps = self._start()
        return self._watch()

    def _start(self) -> list:
        """Each component's step: (its name, its nodes, the process)."""
        count = len(self.spec.components)
        return [(c.name, os.environ.get(_nodelist_var(i, count), ""), self.steps.start(c.launch))
                for i, c in enumerate(self.spec.components)]

    def _begin(self) -> bool:
        """A run that never reached its end (Slurm ended it: a node went down) is a failure there."""
        gone = self.slurm.bad_nodes(self.record.open_run)
        if gone:  # not counted otherwise: a run requeued by hand ends without the runtime too
            node = sorted(gone)[0]
            self.record.failures.append(Failure(NODE, node))
            self.record.excluded = sorted(set(self.record.excluded) | set(gone))
            say(f"slurmgen: the last run of job {self.spec.job} ended when {node} became {gone[node]}: failure "
                f"{len(self.record.failures)} of at most {self.spec.max_failures}; {node} is left out of later runs")
        self.record.open_run = self.nodes
        self.record.runs.append(RunRecord(time.time(), self.nodes))
        self._enter(State.STARTING)
        if len(self.record.failures) > self.spec.max_failures:
            say(f"slurmgen: {len(self.record.failures)} failures, more than --max-failures {self.spec.max_failures}:"
                " not training again", err=True)
            return False
        return True

    def _watch(self) -> int:
        """Until the run ends: the first failure ends it, a warning asks every rank to checkpoint."""
        run, spec = self.run, self.spec
        next_look = self.clock() + self._hang_poll()
        while True:
            if run.warned_at is None and self.files.stop.exists():  # before the ranks' answer to it
                status = self._warned()
                if status is not None:
                    return status
            running = self._reap()
            now = self.clock()
            if run.state == State.TRAINING and now >= next_look:
                next_look = now + self._hang_poll()
                hangs_on, stragglers_on = spec.hang_timeout and self.hang_check, spec.stragglers and self.straggler_check
                beats = hangs.read_beats(self.files.beats) if hangs_on or stragglers_on else {}  # one read for both
                found = self.hang_check(beats=beats) if hangs_on else None
                if found is not None:  # hung ranks do not end by themselves: no settle time
                    run.why, run.suspect, run.status, run.failed_at = HANG, found[1] or "", 1, now - spec.settle
                    self._enter(State.FAILING)
                elif stragglers_on:
                    self._stragglers(beats)
            if run.status and (not running or self.clock() >= run.failed_at + spec.settle):
                if running:
                    say("slurmgen: stopping the components still running", err=True)
                    self._stop_steps(HUNG_STOP_SECONDS if run.why == HANG else STOP_TASKS_SECONDS)
                return self._end(run.status)
            if not running:
                say("slurmgen: all components finished")
                return self._end(0)
            if run.warned_at is not None and not run.status:
                waited = self.clock() - run.warned_at
                if spec.stop_grace and waited > spec.stop_grace and not (self.files.beats / contract.STOPPABLE_FILE).exists():
                    say("slurmgen: your code takes no stop file (it is not a Hugging Face Trainer): stopping it;"
                        " the steps since its own last checkpoint are lost", err=True)
                    self._stop_steps()
                    return self._end(0)
                if waited > spec.stop_wait:
                    say(f"slurmgen: ranks did not stop within {spec.stop_wait:g} s of the warning; stopping them", err=True)
                    self._stop_steps()
                    return self._end(0)
            self.sleep(spec.poll)

    def _warned(self) -> Optional[int]:
        """The batch script made the stop file (USR2 from --signal, or TERM). A node already down
        means Slurm is ending the job for it (25.11 signals the batch script): retry now."""
        if self.slurm.bad_nodes(self.nodes):  # requeue first: Slurm KILLs this process KillWait s on
            requeued = self._retry(NODE, "")
            self._stop_steps()
            return self._finish(State.REQUEUED, 0) if requeued else self._finish(State.FAILED, 1)
        say("slurmgen: time limit or preemption warning: asking every rank to checkpoint")
        self.run.warned_at = self.clock()
        self._enter(State.CHECKPOINTING if not self.run.status else self.run.state)
        return None

    def _end(self, status: int) -> int:
        """The run is over (its steps have ended): requeue, wait for Slurm, or end the job."""
        if self.run.warned_at is None:  # a failure: a retry, or the end
            return self._failed(status) if status else self._finish(State.FINISHED, 0)
        if self.run.leave_out and self._outcome()[0] != contract.FINISHED:  # stopped for a straggler
            self.run.why, self.run.suspect = SLOW, self.run.leave_out
            return self._failed(1)
        how, step = self._outcome()
        saved = f"checkpoint saved at step {step}; " if step else ""
        if how == contract.FINISHED:
            say("slurmgen: training finished before the warning could stop it; not requeueing")
            return self._finish(State.FINISHED, status)
        info = self.slurm.job_info(self.spec.job)
        if status and how != contract.STOPPED and not info.preempted:  # a preempted job: Slurm requeues it
            say("slurmgen: ranks failed after the warning before saying their checkpoint was whole: a failure like"
                " any other", err=True)
            return self._failed(status)
        if info.preempted:
            say(f"slurmgen: {saved}job {self.spec.job} preempted: Slurm requeues it")
            self._finish(State.PREEMPTED, 0)
            self.sleep(PREEMPTED_WAIT)
            return 0
        if self.slurm.bad_nodes(self.nodes):  # the warning came from a lost node
            return self._finish(State.REQUEUED, 0) if self._retry(NODE, "") else self._finish(State.FAILED, 1)
        if self.record.restarts >= self.spec.max_restarts:  # unfinished training must not look like success
            say(f"slurmgen: training unfinished; not requeueing: {self.spec.max_restarts} restart(s) used", err=True)
            return self._finish(State.FAILED, 1)
        say(f"slurmgen: {saved}requeueing job {self.spec.job} (restart {self.record.restarts + 1} of at most "
            f"{self.spec.max_restarts})")
        if not self.slurm.requeue(self.spec.job):
            say("slurmgen: scontrol requeue failed", err=True)
            return self._finish(State.FAILED, 1)
        if self.record.excluded:  # nodes this job left out so far (a spare replaced them) stay out
            self.slurm.exclude(self.spec.job, sorted(set(info.user_excluded) | set(self.record.excluded)))
        self.record.restarts += 1
        return self._finish(State.REQUEUED, 0)

    def _failed(self, status: int) -> int:
        """The run failed: requeued to retry it, or the job's end."""
        return self._finish(State.REQUEUED, 0) if self._retry(self.run.why, self.run.suspect) \
            else self._finish(State.FAILED, status)

    def _retry(self, why: str, node: str) -> bool:
        """A failed run: count it, leave out the nodes to blame, requeue (True) or not."""
        judged = self._judge(why, node)
        return judged is not None and self._requeue_without(*judged)

    def _judge(self, why: str, node: str, lost: Optional[dict] = None):
        """A failed run counted: (why, node, nodes gone, JobInfo) when a retry is due, else None."""
        spec, record = self.spec, self.record
        record.open_run = []  # this run ends here, by the runtime's own hand
        info = self.slurm.job_info(spec.job)
        # 25.11 may drop a failed node from the job's NodeList; lost: nodes the caller found gone itself
        gone = {**self.slurm.bad_nodes(sorted(set(info.nodes) | set(self.nodes))), **(lost or {})}
        log = self.slurm.read_log(info.log) if why == CRASH else ""
        if gone:
            why, node = NODE, sorted(gone)[0]
        node = self.slurm.node_name(node or retry.crashed_node(log), info.nodes)  # no log: no node
        # Before any beat, a failure is most likely the code's own, except a step Slurm refused to start
        # and a node that preflight or the network check found wanting.
        if not gone and why not in (PREFLIGHT, SLOW) and not hangs.read_beats(self.files.beats) and not retry.step_refused(log):
            say("slurmgen: no rank had begun training (train.heartbeat): not retrying a failure that would most"
                " likely happen again", err=True)
            return None
        record.failures.append(Failure(why, node))
        count, where = len(record.failures), f" on {node}" if node else ""
        if count > spec.max_failures:
            say(f"slurmgen: failure {count} ({why}{where}): no retry left (--max-failures {spec.max_failures})", err=True)
            return None
        return why, node, gone, info

    def _requeue_without(self, why: str, node: str, gone: dict, info) -> bool:
        """Requeue the job, the nodes to blame left out of its next run (True), or say why not."""
        spec, record = self.spec, self.record
        count, where = len(record.failures), f" on {node}" if node else ""
        excluded = sorted(set(record.excluded) | set(retry.to_exclude(record.failures, list(gone))))
        new = [n for n in excluded if n not in record.excluded]
        record.excluded = excluded
        if new and not self.slurm.fits_without(spec.layout, info.partition, sorted(set(info.user_excluded) | set(excluded))):
            say(f"slurmgen: failure {count} ({why}{where}); without {','.join(excluded)} the partition cannot hold"
                " the layout any more: not retrying", err=True)
            return False
        reasons = [f"{n} ({gone[n]})" if n in gone else f"{n} ({why})" if n == node and why in NODE_LEVEL
                   else f"{n} (2nd failure there)" for n in new]
        say(f"slurmgen: failure {count} of at most {spec.max_failures} ({why}{where}): requeueing job {spec.job} to"
            " resume from its newest checkpoint" + (f"; excluding {', '.join(reasons)}" if reasons else ""))
        self._save()  # before the requeue, whose TERM may end this process
        if not self.slurm.requeue(spec.job):
            say("slurmgen: scontrol requeue failed", err=True)
            return False
        if excluded:
            self.slurm.exclude(spec.job, sorted(set(info.user_excluded) | set(excluded)))
        return True

    # ---- the pieces ------------------------------------------------------------------------

    def _reap(self) -> int:
        """Name the components that failed; the number still running."""
        running = 0
        for i, (name, nodes, proc) in enumerate(self.run.steps):
            if proc is None:
                continue
            rc = proc.poll()
            if rc is None:
                running += 1
                continue
            self.run.steps[i] = (name, nodes, None)
            if rc != 0:
                rc = rc if rc > 0 else 128 - rc  # killed by a signal: as the shell says it
                say(f"slurmgen: {name} failed with exit status {rc} (nodes {nodes})", err=True)
                if not self.run.status:  # the first failure: the others get SETTLE s to end
                    self.run.status, self.run.failed_at = rc, self.clock()
                    self._enter(State.FAILING)
        return running

    def _stop_steps(self, wait: float = STOP_TASKS_SECONDS) -> None:
        """TERM to the steps' tasks (through Slurm, else to each srun), KILL to those left after WAIT
        seconds (their steps through Slurm, and each srun)."""
        procs = [p for _, _, p in self.run.steps if p is not None]
        answered = self.slurm.signal_steps(self.spec.job)
        if not answered:
            for proc in procs:
                proc.terminate()
        deadline = self.clock() + wait
        while any(p.poll() is None for p in procs) and self.clock() < deadline:
            self.sleep(0.5)
        if any(p.poll() is None for p in procs):
            if answered:  # where no controller answers, squeue would only wait for it
                self.slurm.kill_steps(self.spec.job)
            for proc in procs:
                proc.kill()

    def _finish(self, state: State, status: int) -> int:
        self.run.state = state
        self.record.open_run = [] if state != State.PREEMPTED else self.record.open_run
        if self.record.runs:
            self.record.runs[-1].ended, self.record.runs[-1].state = time.time(), state.value
        self._save()
        return status

    def _enter(self, state: State) -> None:
        self.run.state = state
        self._save()

    def _save(self) -> None:
        self.record.state = self.run.state.value
        self.record.save(self.files.record)

    def _outcome(self) -> tuple[str, str]:
        try:
            how, _, step = self.files.outcome.read_text().strip().partition(" ")
            return how, step
        except OSError:
            return "", ""

    def _hang_poll(self) -> float:
        return min(hangs.POLL_SECONDS, self.spec.hang_timeout / 4) if self.spec.hang_timeout else self.spec.poll


def _nodelist_var(i: int, components: int) -> str:
    return f"SLURM_JOB_NODELIST_HET_GROUP_{i}" if components > 1 else "SLURM_JOB_NODELIST"


if __name__ == "__main__":  # the batch script asks which format this runtime speaks, and where its shell part is
    import sys

    from slurmgen import __version__
    from slurmgen.runtime_spec import FORMAT

    print(f"{FORMAT} {__version__} {RUNTIME}" if sys.argv[1:] == ["--format"] else RUNTIME)  # bare: 0.1.0's scripts ask so
