"""The job runtime: everything that decides inside a running job, in one loop over one set of states,
in the shape of torch's elastic agent: a run starts, each look at it says what happened, the loop
answers, and a restart inside the allocation is another turn. runtime.sh has the rendezvous found
(prepare.py) and starts `python -m slurmgen.job` (command.py). Before training the nodes are checked
(checks.NodeChecks); a failed run is judged by the failure policy (policy.decide, the submit path's
too) and retried on a spare (--spares: replace.Spares) or requeued without the nodes to blame
(requeue.py). At a warning the ranks checkpoint, and the job is requeued, left to Slurm's
preemption, or failed. What lasts across runs is one JobRecord; Slurm, the processes, the clock and
the watches come in from outside, so the state machine runs in unit tests without them. main
returns the job's Result (states.exit_status: the batch script's exit status)."""

from __future__ import annotations

import os
import shutil
import socket
import time
from pathlib import Path
from typing import Callable, Optional

from slurmgen import contract
from slurmgen.job import hangs, policy, requeue, script_end, slurm, steps
from slurmgen.job.checks import NodeChecks, say
from slurmgen.job.record import HANG, NODE, PREFLIGHT, SLOW, Failure, JobRecord
from slurmgen.job.replace import STOP_SECONDS, Spares
from slurmgen.job.states import Job, Result, Run, State

RUNTIME = Path(__file__).with_name("runtime.sh")
STOP_TASKS_SECONDS = 30  # TERM to a step's tasks, then KILL this much later (as Slurm's KillWait)
HUNG_STOP_SECONDS = 10  # after a hang: the hung rank cannot save, the others end within seconds of the TERM
PREEMPTED_WAIT = 3600  # Slurm ends the job at its GraceTime and requeues it itself


class Runtime:
    def __init__(self, job: Job, launcher, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep, hang_check: Optional[Callable] = None,
                 slurm_api=slurm, nodes: Optional[list[str]] = None, straggler_check: Optional[Callable] = None,
                 spares: Optional[Spares] = None):
        self.job, self.spec, self.files = job, job.spec, job.files
        self.steps, self.clock, self.sleep, self.slurm = launcher, clock, sleep, slurm_api
        self.hang_check, self.nodes, self.spares = hang_check, nodes or [], spares
        self.checks = NodeChecks(job, launcher, clock, straggler_check, sleep)
        self.record = JobRecord()
        self.run = Run()
        self.beats_name = os.environ.get(contract.NODE_BEATS_ENV, "")

    def main(self) -> Result:
        self.record = JobRecord.load(self.files.record)
        if self.files.outcome_says()[0] == contract.FINISHED and self.record.last_state() in ("finished", "preempted"):
            say("slurmgen: finished in an earlier run")  # Slurm 25.11 may requeue a preempted job once more
            return Result(State.FINISHED)  # (not a "finished" that a failed run left: a Trainer's first train())
        self.files.outcome.unlink(missing_ok=True)
        shutil.rmtree(self.files.beats, ignore_errors=True)  # (a warning's stop file stays: it may be this run's)
        say(f"slurmgen: job {self.job.id} (restart {self.record.restarts} of at most {self.spec.max_restarts}) on "
            f"{socket.gethostname()}: world size {self.spec.world_size}, master {os.environ.get('MASTER_ADDR', '')}:"
            f"{os.environ.get('MASTER_PORT', '')}")
        result = self._begin() or self._check_nodes()
        while result is None:  # a turn: a run of the components, watched to its end
            self._enter(State.TRAINING)
            self.run.steps = self._start()
            result = self._watch()
            if result.state == State.RESTARTED:
                result = self._restart()  # None: another turn
        self._finish(result)
        if result.state == State.PREEMPTED:  # Slurm ends this process at the end of its GraceTime
            self.sleep(PREEMPTED_WAIT)
        return result

    def _begin(self) -> Optional[Result]:
        """A run that never reached its end (Slurm ended it: a node went down) is a failure there."""
        gone = self.slurm.lost_nodes(self.record.open_run)
        if gone:  # not counted otherwise: a run requeued by hand ends without the runtime too
            node = sorted(gone)[0]
            self.record.failures.append(Failure(NODE, node))
            self.record.excluded = sorted(set(self.record.excluded) | set(gone))
            say(f"slurmgen: the last run of job {self.job.id} ended when {node} became {gone[node]}: failure "
                f"{len(self.record.failures)} of at most {self.spec.max_failures}; {node} is left out of later runs")
        self.record.begin_run(time.time(), self.nodes)
        self._enter(State.STARTING)
        if len(self.record.failures) <= self.spec.max_failures:
            return None
        say(f"slurmgen: {len(self.record.failures)} failures, more than --max-failures {self.spec.max_failures}: not"
            " training again", err=True)
        return Result(State.FAILED, 1)

    def _check_nodes(self) -> Optional[Result]:
        """Preflight, then the network check: None when training may start."""
        if self.spec.preflight:
            self._enter(State.PREFLIGHT)
            found = self.checks.preflight()
            if not found.passed:
                return self._retry(PREFLIGHT, found.culprit, spare=False) if found.culprit else Result(State.FAILED, 1)
            if found.precision:  # one dtype for every rank: bf16 only where every GPU has it
                os.environ[contract.PRECISION_ENV] = found.precision
        if self.spec.net_check and self.checks.nodes > 1:
            self._enter(State.PREFLIGHT)
            found = self.checks.net_check()
            if self.record.runs:
                self.record.runs[-1].network = {f.host: [f.send_gbps, f.receive_gbps, f.latency_ms] for f in found.figures}
            if found.slow:
                return self._leave_out_slow(found.slow)
        return None

    def _leave_out_slow(self, slow: list[str]) -> Optional[Result]:
        """A slow node named before training: swapped for a spare (a slow spare just dropped), else the
        job requeued without it, else trained on."""
        swaps = self._swap(set(slow)) if self.spares else None
        if swaps is not None:
            self.record.open_run = self.nodes
            if self.record.runs:
                self.record.runs[-1].nodes = self.nodes
            for old, new in swaps:
                say(f"slurmgen: {old} replaced by spare {new} before training")
            for spare in sorted(set(slow) - {old for old, _ in swaps}):
                say(f"slurmgen: spare {spare} is slow: left idle for good")
            return None
        result = self._retry(SLOW, slow[0], spare=False)
        if result.state == State.REQUEUED:
            return result
        say(f"slurmgen: training on {slow[0]} all the same")
        return None

    def _start(self) -> list:
        """Each component's steps: (its name, its nodes, the process); with spares one per part (its own
        nodes, the spares it took)."""
        if self.spares:
            return [(c.name, ",".join(part.nodes), self.steps.start(c.launch, *part.args()))
                    for i, c in enumerate(self.spec.components) for part in self.spares.parts(i)]
        het = len(self.spec.components) > 1
        return [(c.name, os.environ.get(f"SLURM_JOB_NODELIST_HET_GROUP_{i}" if het else "SLURM_JOB_NODELIST", ""),
                 self.steps.start(c.launch)) for i, c in enumerate(self.spec.components)]

    def _watch(self) -> Result:
        """Until the run ends: the first failure ends it, a warning asks every rank to checkpoint."""
        run, spec = self.run, self.spec
        every = min(hangs.POLL_SECONDS, spec.hang_timeout / 4) if spec.hang_timeout else self.job.poll
        next_look = self.clock() + every
        while True:
            if run.warned_at is None and self.files.stop.exists():  # before the ranks' answer to it
                result = self._warned()
                if result is not None:
                    return result
            running = self._reap()
            now = self.clock()
            if run.state == State.TRAINING and now >= next_look:
                next_look = now + every
                self._look(now)
            if run.status and (not running or self.clock() >= run.failed_at + self.job.settle):
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
            self.sleep(self.job.poll)

    def _look(self, now: float) -> None:
        """The hang watch and the straggler watch, on one read of the heartbeats."""
        hangs_on, stragglers_on = self.spec.hang_timeout and self.hang_check, self.spec.stragglers is not None
        beats = hangs.read_beats(self.files.beats) if hangs_on or stragglers_on else {}
        found = self.hang_check(beats=beats) if hangs_on else None
        if found is not None:  # hung ranks do not end by themselves: no settle time
            self.run.why, self.run.suspect, self.run.status, self.run.failed_at = HANG, found[1] or "", 1, now - self.job.settle
            self._enter(State.FAILING)
        elif stragglers_on:
            self._stragglers(beats)

    def _stragglers(self, beats: dict) -> None:
        """With --straggler-action exclude, the first straggler whose node can be done without stops the run."""
        named = self.checks.stragglers(beats, self.record.runs[-1], self.run.stragglers)
        if named:
            self._save()
        for found in named:
            if self.spec.stragglers.action != "exclude" or self.run.leave_out:
                continue
            if not self._can_leave_out(found.host):
                say(f"slurmgen: straggler: training on with {found.host}: no spare left, no failure left to"
                    " count, or the partition cannot hold the layout without it")
                continue
            say(f"slurmgen: straggler: asking every rank to checkpoint, to go on without {found.host}")
            self.run.leave_out, self.run.warned_at = found.host, self.clock()
            self.files.stop.touch()
            self._enter(State.CHECKPOINTING)

    def _warned(self) -> Optional[Result]:
        """The stop file (USR2 from --signal, or TERM); with a node down, Slurm is ending the job: a failure."""
        if self.slurm.job_info(self.job.id, self.files).cancelled:  # scancel's TERM, not a warning: nothing to save
            return self._cancelled(stop=True)
        if self.slurm.lost_nodes(self.spares.nodes() if self.spares else self.nodes):
            if self.spares:  # recovered from here: the ranks must not stop at the stop file
                self.files.stop.unlink(missing_ok=True)
                self.run.why, self.run.status, self.run.failed_at = NODE, 1, self.clock() - self.job.settle
                self._enter(State.FAILING)
                return None
            result = self._retry(NODE, "", spare=False)  # requeue first: Slurm KILLs this process KillWait s on
            self._stop_steps()
            return result
        say("slurmgen: time limit or preemption warning: asking every rank to checkpoint")
        self.run.warned_at = self.clock()
        self._enter(State.CHECKPOINTING if not self.run.status else self.run.state)
        return None

    def _end(self, status: int) -> Result:
        """The run is over (its steps have ended): requeue, wait for Slurm, restart, or end the job."""
        if self.run.warned_at is None and not self._stopped_unwarned(status):  # a failure (unless every script ended)
            done = not status or script_end.finished_after_all(self.files, self.spec.world_size, self.slurm, self.job.id)
            return Result(State.FINISHED) if done else self._retry(self.run.why, self.run.suspect, status)
        if self.run.leave_out and self.files.outcome_says()[0] != contract.FINISHED:  # stopped for a straggler
            return self._retry(SLOW, self.run.leave_out)
        how, step = self.files.outcome_says()
        saved = f"checkpoint saved at step {step}; " if step else ""
        if how == contract.FINISHED:
            say("slurmgen: training finished before the warning could stop it; not requeueing")
            return Result(State.FINISHED, status)
        info = self.slurm.job_info(self.job.id, self.files)
        if info.cancelled:
            return self._cancelled()
        if status and how != contract.STOPPED and not info.preempted:  # a preempted job: Slurm requeues it
            say("slurmgen: ranks failed after the warning before saying their checkpoint was whole: a failure like"
                " any other", err=True)
            return self._retry(self.run.why, self.run.suspect, status)
        if info.preempted:
            say(f"slurmgen: {saved}job {self.job.id} preempted: Slurm requeues it")
            return Result(State.PREEMPTED)
        if self.slurm.lost_nodes(self.nodes):  # the warning came from a lost node
            return self._retry(NODE, "", spare=False)
        return Result(State.REQUEUED) if requeue.to_resume(self.slurm, self.job.id, self.record, self.spec.max_restarts,
                                                           info, saved) else Result(State.FAILED, 1)

    def _stopped_unwarned(self, status: int) -> bool:
        """Components ended well, ranks say "stopped": a TERM reached the steps and not this script (a site
        preempting with a TERM to the steps alone). As at a warning, never a finish."""
        if status or self.files.outcome_says()[0] != contract.STOPPED:
            return False
        say("slurmgen: the ranks stopped at a signal this script never got (a TERM to the steps): as at a warning")
        self.run.warned_at = self.clock()
        return True

    def _retry(self, why: str, node: str, status: int = 1, spare: bool = True) -> Result:
        """A failed run judged by the failure policy: a spare takes the blamed node (RESTARTED, where
        spare), or the job is requeued without the nodes to blame (REQUEUED), or it ends (FAILED)."""
        spare = spare and self.spares is not None
        self.record.open_run = []  # this run ends here, by the runtime's own hand
        seen, info = requeue.seen(self.slurm, self.job.id, self.nodes, self.files, why, node,
                                  self.spares.lost() if spare else {})
        if info.cancelled:  # the user ended it (and its ranks with it): no failure to count, nothing to retry
            return self._cancelled()
        blameless = requeue.no_failure(self.job.id, self.record, seen, info, self.sleep)  # preempted, step refused
        if blameless:
            return Result(blameless)
        decision = policy.decide(self.record.failures, self.record.excluded, seen, self.spec.max_failures)
        self.record.failures = list(decision.failures)
        if not decision.retry:
            say(f"slurmgen: {decision.said}", err=True)
            return Result(State.FAILED, status)
        if spare:
            bad = set(decision.exclude) - set(self.record.excluded) | ({decision.node} if decision.node else set())
            swaps = self._swap(bad)
            if swaps is not None:
                say("slurmgen: " + policy.spare_line(decision, self.spec.max_failures, swaps, seen.gone))
                return Result(State.RESTARTED)
            say(f"slurmgen: failure {decision.count} ({decision.why}{decision.where}): {self.spares.why_not(bad)};"
                " requeueing instead")
        self.record.excluded = list(decision.exclude)  # saved before the requeue, whose TERM may end this process
        ok = requeue.requeue_without(self.slurm, self.job.id, self.spec.layout, info, decision, self.spec.max_failures,
                                     before=self._save)
        return Result(State.REQUEUED) if ok else Result(State.FAILED, status)

    def _cancelled(self, stop: bool = False) -> Result:
        """The user cancelled the job (scancel): final, whatever the ranks do (Slurm KILLs them KillWait s on)."""
        say(f"slurmgen: job {self.job.id} was cancelled (scancel): ending it, not requeueing it")
        if stop:
            self._stop_steps(HUNG_STOP_SECONDS)
        return Result(State.CANCELLED)

    def _swap(self, bad: set) -> Optional[list]:
        """Bad nodes swapped for spares (None: too few, or the batch node): out of the job for good."""
        swaps = self.spares.swap(bad)
        replaced = {old for old, _ in swaps or ()}
        self.record.excluded = sorted(set(self.record.excluded) | replaced)
        self.nodes = [n for n in self.nodes if n not in replaced]  # not the job's any more: a later warning is no loss
        return swaps

    def _can_leave_out(self, node: str) -> bool:
        """A failure left to count, and a spare for node or a partition that holds the layout without it."""
        if len(self.record.failures) >= self.spec.max_failures:
            return False
        return bool(self.spares and self.spares.can_replace(node)) or requeue.fits_without(
            self.slurm, self.spec.layout, self.slurm.job_info(self.job.id, self.files), [*self.record.excluded, node])

    def _restart(self) -> None:
        """The components again, on the placement as it is now: a fresh run of the same allocation."""
        self.record.end_run(time.time(), State.RESTARTED.value)
        self.record.begin_run(time.time(), self.nodes)
        self.run = Run()
        self.files.clear_run()
        if self.beats_name:  # the old ranks' node-local beats must not be published as the new ones'
            os.environ[contract.NODE_BEATS_ENV] = f"{self.beats_name}-{len(self.record.runs)}"

    # ---- the pieces ------------------------------------------------------------------------

    def _reap(self) -> int:
        """Name the components that failed; the number still running."""
        running, failed = steps.reap(self.run.steps)
        for name, nodes, rc in failed:
            say(f"slurmgen: {name} failed with exit status {rc} (nodes {nodes})", err=True)
            if not self.run.status:  # the first failure: the others get SETTLE s to end
                self.run.status, self.run.failed_at = rc, self.clock()
                self._enter(State.FAILING)
        return running

    def _stop_steps(self, wait: float = STOP_TASKS_SECONDS) -> None:
        """TERM, then KILL WAIT s later; with spares sooner, as a spare's launch waits for the old steps."""
        if self.spares:
            self.spares.stopping()  # the stop's signal reaches the probes too
            wait = min(wait, STOP_SECONDS)
        steps.stop([p for _, _, p in self.run.steps if p is not None], self.slurm, self.job.id, wait,
                   self.clock, self.sleep)

    def _finish(self, result: Result) -> None:
        self.record.end_run(time.time(), result.state.value)
        self._enter(result.state)  # (never FAILING: no probe)

    def _enter(self, state: State) -> None:
        if state == State.FAILING and self.spares:  # asked now, read when the run has ended
            self.spares.probe()
        self.run.state = state
        self._save()

    def _save(self) -> None:
        self.record.state = self.run.state.value
        self.record.save(self.files.record)


if __name__ == "__main__":  # the batch script asks which format this runtime speaks, and where its shell part is
    from slurmgen.job.prepare import say_format

    say_format(RUNTIME)
