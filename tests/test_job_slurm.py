"""What the job runtime does to Slurm (slurmgen.job.slurm), with scontrol recorded: a requeue's TERM
must not stop the exclusion that follows it, and pins Slurm adds while it requeues are dropped."""
import signal
import subprocess

import pytest

from slurmgen.job import slurm
from slurmgen.site import jobs


@pytest.fixture
def scontrol(monkeypatch):
    calls = []

    def run(*args):
        calls.append(list(args))
        return subprocess.CompletedProcess(args, 0, "", "")
    monkeypatch.setattr(slurm, "_scontrol", run)
    return calls


def test_a_requeue_ignores_its_own_term_and_so_do_the_scontrols_after_it(scontrol):
    before = signal.getsignal(signal.SIGTERM)
    try:
        assert slurm.requeue("77")
        assert scontrol == [["requeue", "Incomplete", "77"]]  # a job cancelled meanwhile stays cancelled
        # ignored, not handled: the scontrol processes that update the exclusion inherit it
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
        out = subprocess.run(["bash", "-c", "kill -TERM $$; echo survived"], capture_output=True, text=True)
        assert out.stdout.strip() == "survived"
    finally:
        signal.signal(signal.SIGTERM, before)


def test_pins_added_while_slurm_requeues_are_dropped_too(scontrol, monkeypatch):
    # 22.05 requeues a het job's components one after the other and pins each to its old nodes;
    # the second component's pins appear only after the exclusion was set.
    answers = iter([[{"JobId": "77", "ReqNodeList": "(null)"}, {"JobId": "78", "ReqNodeList": "(null)"}],
                    [{"JobId": "77", "ReqNodeList": "node[1-2]"}, {"JobId": "78", "ReqNodeList": "node[3-4]"}]])
    last = [{"JobId": "77", "ReqNodeList": "node[1-2]"}, {"JobId": "78", "ReqNodeList": "node4"}]
    monkeypatch.setattr(jobs, "job_records", lambda job: next(answers, last))
    slurm.exclude("77", ["node3"], settle=0.6)
    assert scontrol[0] == ["update", "JobId=77", "ExcNodeList=node3"]
    assert ["update", "JobId=78", "ReqNodeList=node4"] in scontrol
    assert not any("JobId=77" in c[1] and "ReqNodeList" in c[2] for c in scontrol if c[0] == "update")


def test_a_failed_runs_log_is_read_from_its_end(tmp_path):
    """Crash blame reads the log's last bytes, not gigabytes of rank output: torchrun's failure
    report comes last and is found; what lies before the tail is not read."""
    log = tmp_path / "job.out"
    with open(log, "w") as out:
        out.write("slurmgen: job 7 (restart 0 of at most 3)\n" + "x" * 999 + "\n")
        out.write("rank output\n" * 2000)
        out.write("[2026-12-05 08:00:00] host: node3 rank: 3 exitcode: -9\n")
    text = slurm.read_log(str(log), tail=4096)
    assert len(text) == 4096 and text.endswith("exitcode: -9\n") and "slurmgen: job 7" not in text
    assert slurm.read_log(str(log)) == log.read_text()
    assert slurm.read_log(str(tmp_path / "missing.out")) == ""


def test_a_node_is_lost_when_down_or_not_answering_never_for_a_drain():
    """A drain for a reboot or a health check lets the job on the node run to its end: not lost (a run
    then must not be retried or requeued for it)."""
    from slurmgen.job.slurm import is_lost

    for state in ("DOWN", "DOWN*", "DOWN+NOT_RESPONDING", "IDLE+NOT_RESPONDING", "MIXED*", "DOWN+DRAIN"):
        assert is_lost(state), state
    for state in ("MIXED+DRAIN+REBOOT_REQUESTED", "ALLOCATED+DRAIN", "IDLE+DRAIN", "MIXED", "ALLOCATED+COMPLETING",
                  "MIXED+REBOOT_REQUESTED", "ALLOCATED+PLANNED"):
        assert not is_lost(state), state


@pytest.mark.parametrize("fields,cancelled", [
    ({"JobState": "CANCELLED"}, True),
    # scancel'd, its processes still ending: COMPLETING, ended before its limit
    ({"JobState": "COMPLETING", "StartTime": "2026-12-06T05:20:17", "EndTime": "2026-12-06T05:20:27",
      "TimeLimit": "00:10:00", "PreemptTime": "None"}, True),
    ({"JobState": "COMPLETING", "StartTime": "2026-12-06T05:20:36", "EndTime": "2026-12-06T05:20:38",
      "TimeLimit": "UNLIMITED", "PreemptTime": "None"}, True),
    # at its time limit, preempted, still running, or nothing to tell by: not a cancel
    ({"JobState": "COMPLETING", "StartTime": "2026-12-06T05:20:17", "EndTime": "2026-12-06T05:30:17",
      "TimeLimit": "00:10:00", "PreemptTime": "None"}, False),
    ({"JobState": "COMPLETING", "StartTime": "2026-12-06T05:20:17", "EndTime": "2026-12-06T05:20:27",
      "TimeLimit": "1-00:00:00", "PreemptTime": "2026-12-06T05:20:27"}, False),
    ({"JobState": "RUNNING", "StartTime": "2026-12-06T05:20:17", "EndTime": "Unknown",
      "TimeLimit": "UNLIMITED", "PreemptTime": "None"}, False),
    ({"JobState": "COMPLETING", "StartTime": "Unknown", "EndTime": "Unknown", "TimeLimit": "UNLIMITED"}, False),
])
def test_a_cancel_is_told_while_the_job_is_still_completing(fields, cancelled):
    """scontrol shows a cancelled job COMPLETING until its last process ends (seen on 22.05: only
    JobState and EndTime change at scancel), which is when the runtime and the tasks ask."""
    assert slurm.was_cancelled(fields) is cancelled
