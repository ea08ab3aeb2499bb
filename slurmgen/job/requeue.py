"""The job runtime's hands on Slurm after a failed run: what Slurm and the job log say of the failure
(for the failure policy, policy.decide), whether the partition still holds the layout without some
nodes, the requeue that leaves them out, and the requeue after a warning. The runtime (runtime.py)
decides what follows."""

from __future__ import annotations

from slurmgen.job import hangs, policy, retry
from slurmgen.job.checks import say
from slurmgen.job.record import CRASH
from slurmgen.job.states import State

# Steps Slurm refused, per job, that start the components again in the same allocation (after this
# pause) before a refusal counts as a failure.
IN_PLACE, IN_PLACE_PAUSE = 2, 5.0


def seen(slurm_api, job: str, nodes: list[str], files, why: str, node: str, lost: dict):
    """What the policy is told of this failure, and the job's info from Slurm (a cancel marked in the
    job's folder, files, counts). lost: nodes the spares' probes found gone."""
    info = slurm_api.job_info(job, files)
    # 25.11 may drop a failed node from the job's NodeList
    gone = {**slurm_api.lost_nodes(sorted(set(info.nodes) | set(nodes))), **lost}
    log = slurm_api.read_log(info.log) if why == CRASH else ""
    node = node if gone else slurm_api.node_name(node or retry.crashed_node(log), info.nodes)  # no log: no node
    return policy.Seen(why, node, gone, trained=bool(hangs.read_beats(files.beats)), refused=retry.step_refused(log),
                       uncreated=retry.step_uncreated(log)), info


def no_failure(job: str, record, seen: policy.Seen, info, sleep):
    """The state of a run that ended by no fault of the job's, else None: PREEMPTED (the preemption's
    TERM, to the steps alone, ended ranks that could not save), or RESTARTED in place after a step the
    controller refused to create: Slurm's state of a moment, neither the code's nor a node's (22.05 once
    refused the GPU step of a node just back from a drain), so neither a failure nor a requeue, up to
    IN_PLACE times a job. (A node that could not start its tasks is blamed: policy.decide.)"""
    if info.preempted:
        say(f"slurmgen: job {job} preempted (its ranks ended at its signal): no failure counted")
        return State.PREEMPTED
    if not seen.uncreated or seen.gone or record.refusals >= IN_PLACE:
        return None
    record.refusals += 1
    # "slurmgen: job " begins the log's next run (retry.last_run): the refusal is this run's alone
    say(f"slurmgen: job {job}: Slurm refused a step (its state, not the code's): starting the components again in"
        f" this allocation, no failure counted ({record.refusals} of at most {IN_PLACE})")
    sleep(IN_PLACE_PAUSE)
    return State.RESTARTED


def fits_without(slurm_api, layout, info, nodes) -> bool:
    """Whether the job's partition holds the layout without these nodes (and those the user excluded)."""
    return slurm_api.fits_without(layout, info.partition, sorted(set(info.user_excluded) | set(nodes)))


def requeue_without(slurm_api, job: str, layout, info, decision: policy.Decision, max_failures: int, before) -> bool:
    """Requeue the job, the decision's nodes left out of its next run (True), or say why not. before():
    called just before the requeue, whose TERM may end this process."""
    if decision.reasons and not fits_without(slurm_api, layout, info, decision.exclude):
        say(f"slurmgen: {policy.no_room(decision)}", err=True)
        return False
    say("slurmgen: " + policy.retry_line(decision, max_failures, f"requeueing job {job} to resume from its newest"
                                         " checkpoint"))
    before()
    if not slurm_api.requeue(job):
        say("slurmgen: scontrol requeue failed", err=True)
        return False
    if decision.exclude:
        slurm_api.exclude(job, sorted(set(info.user_excluded) | set(decision.exclude)))
    return True


def to_resume(slurm_api, job: str, record, max_restarts: int, info, saved: str) -> bool:
    """After a warning: requeue the job to resume from the checkpoint it saved (a restart counted;
    the nodes it left out so far stay out), or say why not. Unfinished training must not look like
    success: with no restart left the caller fails the job."""
    if record.restarts >= max_restarts:
        say(f"slurmgen: training unfinished; not requeueing: {max_restarts} restart(s) used", err=True)
        return False
    say(f"slurmgen: {saved}requeueing job {job} (restart {record.restarts + 1} of at most {max_restarts})")
    if not slurm_api.requeue(job):
        say("slurmgen: scontrol requeue failed", err=True)
        return False
    if record.excluded:  # nodes this job left out so far (a spare replaced them) stay out
        slurm_api.exclude(job, sorted(set(info.user_excluded) | set(record.excluded)))
    record.restarts += 1
    return True
