"""The failure policy both paths share (slurmgen.job.policy): what is counted, blamed and left out, and
when no retry is due, with the words both paths print."""
from slurmgen.job.policy import Seen, decide, no_room, retry_line
from slurmgen.job.record import Failure


def test_a_crash_before_any_rank_trained_is_the_codes_own_and_not_retried():
    decision = decide([], [], Seen("crash", "node3", trained=False), max_failures=2)
    assert not decision.retry and decision.failures == ()
    assert decision.said == ("no rank had begun training (train.heartbeat): not retrying a failure that would most"
                             " likely happen again")


def test_a_step_slurm_refused_is_retried_though_no_rank_trained():
    decision = decide([], [], Seen("crash", "node3", trained=False, refused=True), max_failures=2)
    assert decision.retry and decision.failures == (Failure("crash", "node3"),) and decision.exclude == ()


def test_the_second_failure_on_a_node_leaves_it_out():
    first = decide([], [], Seen("hang", "node3"), 2)
    assert first.retry and first.exclude == () and retry_line(first, 2, "requeueing") == \
        "failure 1 of at most 2 (hang on node3): requeueing"
    second = decide(list(first.failures), [], Seen("crash", "node3"), 2)
    assert second.retry and second.exclude == ("node3",) and second.reasons == ("node3 (2nd failure there)",)
    assert retry_line(second, 2, "submitting again") == \
        "failure 2 of at most 2 (crash on node3): submitting again; excluding node3 (2nd failure there)"


def test_a_lost_node_makes_any_failure_its_own_and_is_left_out_at_once():
    decision = decide([], ["node9"], Seen("crash", "node1", gone={"node3": "DOWN+NOT_RESPONDING"}), 2)
    assert (decision.why, decision.node) == ("node", "node3")
    assert decision.exclude == ("node3", "node9") and decision.reasons == ("node3 (DOWN+NOT_RESPONDING)",)


def test_a_node_preflight_or_the_network_check_named_is_left_out_at_once_before_training():
    for why in ("preflight", "slow"):
        decision = decide([], [], Seen(why, "node2", trained=False), 2)
        assert decision.retry and decision.reasons == (f"node2 ({why})",)


def test_one_failure_more_than_the_budget_ends_the_job_and_no_room_says_which_nodes():
    decision = decide([Failure("hang", "node1"), Failure("crash", "node2")], [], Seen("crash", "node4"), 2)
    assert not decision.retry and decision.count == 3
    assert decision.said == "failure 3 (crash on node4): no retry left (--max-failures 2)"
    kept = decide([Failure("crash", "node3")], ["node1"], Seen("crash", "node3"), 2)
    assert no_room(kept) == ("failure 2 (crash on node3); without node1,node3 the partition cannot hold the layout any"
                             " more: not retrying")
