"""The retry decision `slurmgen submit` and `slurmgen.run` share (slurmgen.submit.resubmit.decide_next),
with the real failure policy: what is submitted next (the same job, a node left out, pins given up) or
why not, and the lines said. The partition's answer (Slurm's sinfo in a job) is given as `fits`. And
what counts as begun: a step logged since the submission, a hang, or for a function the failed task's
call of it."""
from pathlib import Path

from slurmgen.job.policy import Seen
from slurmgen.job.record import CRASH, HANG
from slurmgen.plan.spec import JobSpec
from slurmgen.submit.blame import TaskFailure
from slurmgen.submit.resubmit import ACTION, FUNCTION_ACTION, Retries, began, decide_next

SPEC = JobSpec(gpus=(1, 1, 2, 2), time="10").validate()


class Partition:
    """Answers whether the layout fits without the nodes named, and remembers what it was asked."""

    def __init__(self, fits=True):
        self.fits, self.asked = fits, []

    def __call__(self, names):
        self.asked.append(names)
        return self.fits


def test_a_first_crash_after_training_began_submits_the_same_job_again_without_asking_the_partition():
    partition = Partition()
    step = decide_next(SPEC, Retries.of(SPEC), Seen(CRASH, "node3"), FUNCTION_ACTION, fits=partition)
    assert step.spec == SPEC and partition.asked == []
    assert step.lines == ("failure 1 of at most 2 (crash on node3): submitting again; the function starts again"
                          " from the top",)
    assert step.retries.excluded == () and len(step.retries.failures) == 1


def test_a_second_crash_on_one_node_leaves_it_out_beside_the_users_own_exclusion():
    spec = JobSpec(gpus=(1, 1, 2, 2), time="10", exclude="node9").validate()
    partition = Partition()
    first = decide_next(spec, Retries.of(spec), Seen(CRASH, "node3"), fits=partition)
    second = decide_next(first.spec, first.retries, Seen(CRASH, "node3"), fits=partition)
    assert first.spec.exclude == "node9"
    assert second.spec.exclude == "node[3,9]" and partition.asked == [["node3", "node9"]]
    assert second.lines == (f"failure 2 of at most 2 (crash on node3): {ACTION}; excluding node3 (2nd failure"
                            " there)",)
    assert second.retries.excluded == ("node3",)


def test_a_partition_that_cannot_do_without_the_node_stops_the_retries():
    first = decide_next(SPEC, Retries.of(SPEC), Seen(CRASH, "node3"), fits=Partition())
    step = decide_next(first.spec, first.retries, Seen(CRASH, "node3"), fits=Partition(fits=False))
    assert step.spec is None
    assert step.lines == ("failure 2 (crash on node3); without node3 the partition cannot hold the layout any"
                          " more: not retrying",)


def test_a_pinned_node_left_out_gives_up_the_pins():
    spec = JobSpec(gpus=(1, 1), time="10", nodelist=("node1", "node2")).validate()
    step = decide_next(spec, Retries.of(spec), Seen(HANG, "node2"), fits=Partition())
    step = decide_next(step.spec, step.retries, Seen(HANG, "node2"), fits=Partition())
    assert (step.spec.exclude, step.spec.nodelist) == ("node2", ())


def test_no_retry_before_any_rank_began_nor_past_max_failures():
    early = decide_next(SPEC, Retries.of(SPEC), Seen(CRASH, "node3", trained=False), fits=Partition())
    assert early.spec is None and early.lines[0].startswith("no rank had begun training")
    spec = JobSpec(gpus=(1, 1, 2, 2), time="10", max_failures=0).validate()
    none_left = decide_next(spec, Retries.of(spec), Seen(CRASH, "node3"), fits=Partition())
    assert none_left.spec is None
    assert none_left.lines == ("failure 1 (crash on node3): no retry left (--max-failures 0)",)


RAISED = TaskFailure(1, "node2", Path("9_1_log.err"), "RuntimeError: boom")  # its start line named node2
NEVER_STARTED = TaskFailure(1, None, Path("9_1_log.err"), "ModuleNotFoundError: No module named 'mine'")


def test_a_functions_failure_counts_once_the_task_called_it():
    assert began(RAISED, None, 1000.0, hung=False, function=True)
    assert not began(NEVER_STARTED, None, 1000.0, hung=False, function=True)
    assert not began(None, None, 1000.0, hung=False, function=True)  # nothing to blame: the job as a whole


def test_a_scripts_failure_counts_after_a_step_of_this_submission_or_a_hang():
    assert not began(RAISED, None, 1000.0, hung=False, function=False)
    assert not began(RAISED, {"step": 2, "time": 900.0}, 1000.0, hung=False, function=False)  # the last job's
    assert began(RAISED, {"step": 2, "time": 1001.0}, 1000.0, hung=False, function=False)
    assert began(None, None, 1000.0, hung=True, function=False)
