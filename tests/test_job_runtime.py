"""The job runtime's state machine (slurmgen.job.runtime) without Slurm: a fake clock, fake Slurm
answers and fake steps, one test per transition. tests/test_script_shims.py runs the same runtime
from a rendered script, and tests/e2e/ on a real cluster."""
import json

import pytest

from slurmgen.job.record import USER_CANCEL, Failure, JobFiles, JobRecord
from slurmgen.job.runtime import PREEMPTED_WAIT, Runtime
from slurmgen.job.states import Job, exit_status
from slurmgen.runtime_spec import Component, Preflight, RuntimeSpec
from slurmgen.job.slurm import JobInfo, marked

NODES = ["node1", "node2", "node3", "node4"]


def job_of(files, components, world=6, **settings) -> Job:
    """The runtime's Job for a test: the script's runtime spec (RuntimeSpec's fields), the job's id 77 and
    folder, and the test clock's poll and settle times."""
    timing = {k: settings.pop(k) for k in ("poll", "settle") if k in settings}
    if "spares" in settings:
        settings["spare_nodes"] = settings.pop("spares")
    if isinstance(settings.get("preflight"), bool):
        settings["preflight"] = Preflight("module", "train.sft") if settings["preflight"] else None
    return Job(RuntimeSpec(world, tuple(components), **settings), "77", files, **{"settle": 10.0, **timing})


def status(runtime) -> int:
    """The batch script's exit status for the runtime's result."""
    return exit_status(runtime.main())


class Clock:
    def __init__(self):
        self.now = 1000.0
        self.slept = []

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.slept.append(seconds)
        self.now += seconds


class Proc:
    """A step: `behaviour(now)` says its exit status once it has ended (None while it runs)."""

    def __init__(self, clock, behaviour):
        self.clock, self.behaviour, self.rc = clock, behaviour, None

    def poll(self):
        if self.rc is None:
            self.rc = self.behaviour(self.clock())
        return self.rc

    def terminate(self):
        self.rc = 143 if self.rc is None else self.rc

    def kill(self):
        self.rc = 137 if self.rc is None else self.rc

    def wait(self, timeout=None):
        return self.poll()


class Steps:
    def __init__(self, clock, files, components, reports=()):
        self.clock, self.files, self.components, self.reports = clock, files, components, list(reports)
        self.started = []

    def start(self, function, *args, stdout=None):
        self.started.append(function)
        if function == "preflight_step":
            for report in self.reports.pop(0):
                stdout.write("SLURMGEN_PREFLIGHT " + json.dumps(report) + "\n")
            stdout.flush()
            return Proc(self.clock, lambda now: 0)
        return Proc(self.clock, self.components[function])


class Slurm:
    def __init__(self, bad=None, preempted=False, log="", fits=True, requeue_ok=True, nodes=NODES, cancelled=False):
        self.bad, self.preempted, self.log, self.fits, self.requeue_ok = bad or {}, preempted, log, fits, requeue_ok
        self.cancelled = cancelled  # JobState=CANCELLED: the user's scancel
        self.nodes = nodes  # the job's NodeList as scontrol shows it
        self.requeued, self.excluded = [], None

    def job_info(self, job, files=None):  # scontrol's part stood in for; the job folder's cancel mark read for real
        return marked(JobInfo(nodes=self.nodes, partition="gpu", log="job.out", preempted=self.preempted,
                              cancelled=self.cancelled), files)

    def lost_nodes(self, names):
        return {n: s for n, s in self.bad.items() if n in names}

    def node_name(self, host, nodes):
        return host.split(".")[0]

    def fits_without(self, layout, partition, excluded):
        return self.fits

    def requeue(self, job):
        self.requeued.append(job)
        return self.requeue_ok

    def exclude(self, job, names):
        self.excluded = names

    def signal_steps(self, job):
        return False  # as where no controller answers: the runtime TERMs its sruns itself

    def kill_steps(self, job):
        self.killed = True

    def read_log(self, path):
        return self.log


def running(now):
    return None


def exits(status, at):
    return lambda now: status if now >= at else None


def beats(files, *ranks):
    files.beats.mkdir(parents=True, exist_ok=True)
    for rank in ranks:
        (files.beats / f"rank-{rank}").write_text(f"{rank} 3 1.0 node1 99\n")


@pytest.fixture
def job(tmp_path):
    """Build a runtime for a 1,1,2,2 job: job(component_0=..., component_1=..., slurm=..., **spec)."""
    files = JobFiles.of(tmp_path, "77")
    files.folder.mkdir(parents=True)
    clock = Clock()

    def make(component_0=running, component_1=running, slurm=None, reports=(), hang_check=None, **settings):
        components = (Component("component 0 (2 node(s) x 1 GPU)", 2, 1, "component_0"),
                      Component("component 1 (2 node(s) x 2 GPUs)", 2, 2, "component_1"))
        steps = Steps(clock, files, {"component_0": component_0, "component_1": component_1}, reports)
        runtime = Runtime(job_of(files, components, **settings), steps, clock=clock, sleep=clock.sleep, hang_check=hang_check,
                          slurm_api=slurm or Slurm(), nodes=NODES)
        return runtime, steps
    make.files, make.clock = files, clock
    return make


def record(files):
    return JobRecord.load(files.record)


def test_a_run_whose_components_all_finish_ends_the_job(job, capsys):
    runtime, steps = job(component_0=exits(0, 1005), component_1=exits(0, 1008))
    assert status(runtime) == 0
    assert steps.started == ["component_0", "component_1"]
    assert capsys.readouterr().out.splitlines()[-1] == "slurmgen: all components finished"
    assert record(job.files).state == "finished" and record(job.files).open_run == []
    [run] = record(job.files).runs  # what `slurmgen report` counts as allocated time
    assert run.state == "finished" and run.nodes == NODES and 0 < run.started <= run.ended


def test_a_crash_before_training_began_is_not_retried(job, capsys):
    slurm = Slurm()
    runtime, _ = job(component_1=exits(3, 1002), slurm=slurm)
    assert status(runtime) == 3
    err = capsys.readouterr().err
    assert "slurmgen: component 1 (2 node(s) x 2 GPUs) failed with exit status 3" in err
    assert "no rank had begun training" in err and slurm.requeued == []
    assert record(job.files).state == "failed"


REFUSED = ("slurmgen: job 77\nsrun: error: Unable to create step for job 78: Invalid generic resource"
           " (gres) specification\n")


def test_a_step_slurm_refused_to_create_starts_again_in_place_with_no_failure(job, capsys):
    """Seen with 22.05 (CI run 29, a node just back from a drain; once before in a --gpus auto job): a
    component's srun refused ("Invalid generic resource (gres) specification") for a step like those of
    every other run. Neither the code's nor a node's doing: the components start again in the same
    allocation, no failure counted, no requeue; the job finishes."""
    slurm = Slurm(log=REFUSED)
    runtime, steps = job(component_0=exits(0, 1030), component_1=lambda now: 1 if now < 1005 else exits(0, 1020)(now),
                         slurm=slurm)
    assert status(runtime) == 0
    out = capsys.readouterr().out
    assert ("slurmgen: job 77: Slurm refused a step (its state, not the code's): starting the components again in"
            " this allocation, no failure counted (1 of at most 2)") in out
    assert steps.started == ["component_0", "component_1"] * 2 and slurm.requeued == []
    saved = record(job.files)
    assert saved.failures == [] and saved.refusals == 1 and [r.state for r in saved.runs] == ["restarted", "finished"]


def test_a_step_refused_again_and_again_is_a_failure_retried_by_a_requeue(job, capsys):
    """After IN_PLACE starts in place, a refusal counts as a failure (it may be the job's own request) and
    is retried like one, before any rank began: a requeue."""
    slurm = Slurm(log=REFUSED)
    runtime, steps = job(component_1=exits(1, 1002), slurm=slurm)
    assert status(runtime) == 0
    out = capsys.readouterr()
    assert out.out.count("Slurm refused a step") == 2 and "no rank had begun training" not in out.err
    assert "failure 1 of at most 2 (crash): requeueing job 77" in out.out + out.err and slurm.requeued == ["77"]
    assert steps.started.count("component_1") == 3 and record(job.files).refusals == 2


def test_a_node_that_could_not_start_its_tasks_is_blamed_and_the_job_retried(job, capsys):
    """Seen once with 25.11: a component's step failed to start its tasks on one node ("Slurmd could not
    execve job": slurmstepd's cgroup, affinity or fork failed before the exec). No rank had begun, yet
    the failure is Slurm's: retried, and the node named (a second time there leaves it out)."""
    slurm = Slurm(log="slurmgen: job 77\nsrun: error: Task launch for StepId=78.0 failed on node node3: Slurmd could"
                      " not execve job\nsrun: error: task 2 launch failed: Slurmd could not execve job\n")
    runtime, _ = job(component_1=exits(1, 1002), slurm=slurm)
    assert status(runtime) == 0
    out = capsys.readouterr()
    assert "no rank had begun training" not in out.err
    assert "failure 1 of at most 2 (crash on node3): requeueing job 77" in out.out + out.err
    assert slurm.requeued == ["77"] and record(job.files).failures == [Failure("crash", "node3")]


def test_a_crash_is_retried_and_a_node_blamed_twice_is_left_out(job, capsys):
    log = "slurmgen: job 77\nsrun: error: node3: task 2: Exited with exit code 13\n"
    slurm = Slurm(log=log)

    def crash_after_beats(now):
        beats(job.files, 0, 1)
        return 13 if now >= 1003 else None
    runtime, _ = job(component_1=crash_after_beats, slurm=slurm)
    assert status(runtime) == 0
    assert "slurmgen: failure 1 of at most 2 (crash on node3): requeueing job 77 to resume from its newest" \
           " checkpoint\n" in capsys.readouterr().out
    assert slurm.requeued == ["77"] and slurm.excluded is None
    assert record(job.files).failures == [Failure("crash", "node3")] and record(job.files).state == "requeued"
    runtime, _ = job(component_1=crash_after_beats, slurm=slurm)  # the requeued run
    assert status(runtime) == 0
    assert "(crash on node3): requeueing job 77 to resume from its newest checkpoint; excluding node3 (2nd failure" \
           " there)" in capsys.readouterr().out
    assert slurm.excluded == ["node3"] and record(job.files).excluded == ["node3"]
    assert [r.state for r in record(job.files).runs] == ["requeued", "requeued"]


def test_other_components_get_the_settle_time_then_are_stopped(job, capsys):
    runtime, _ = job(component_0=exits(4, 1001), component_1=running, settle=5.0)
    assert status(runtime) == 4
    err = capsys.readouterr().err
    assert "slurmgen: stopping the components still running" in err
    assert "component 1" not in err.split("stopping")[0]  # stopped, not counted as a failure of its own
    assert 1005 <= job.clock.now < 1010


def test_too_many_failures_start_no_training(job, capsys):
    JobRecord(failures=[Failure("crash", "node1")] * 3).save(job.files.record)
    runtime, steps = job()
    assert status(runtime) == 1
    assert steps.started == []
    assert "slurmgen: 3 failures, more than --max-failures 2: not training again" in capsys.readouterr().err


def test_a_hang_stops_the_job_and_retries_it_without_waiting_to_settle(job, capsys):
    slurm = Slurm()
    looks = []

    def hang_check(**_):  # given the beats the runtime read
        beats(job.files, 0)  # the ranks had begun
        looks.append(job.clock.now)
        return (["rank 3 on node3 is stuck"], "node3") if job.clock.now >= 1020 else None
    runtime, _ = job(slurm=slurm, hang_check=hang_check, hang_timeout=20.0)
    assert status(runtime) == 0
    assert "failure 1 of at most 2 (hang on node3): requeueing job 77" in capsys.readouterr().out
    assert looks[0] == 1005 and looks[-1] < 1025  # every min(5 s, timeout / 4)
    assert record(job.files).failures == [Failure("hang", "node3")]


def test_after_a_hang_the_ranks_left_get_10_s_from_the_term_to_the_kill(job, capsys):
    """A hung rank takes no TERM (stopped, or stuck) and cannot checkpoint: KILL comes 10 s after the
    TERM, not the 30 s a crash's survivors get (their time to end cleanly)."""
    class Answering(Slurm):
        def signal_steps(self, job_id):
            self.termed = job.clock.now
            return True

        def kill_steps(self, job_id):
            self.killed = job.clock.now
    slurm = Answering()

    def hang_check(**_):
        beats(job.files, 0)
        return (["rank 3 on node3 is stuck"], "node3") if job.clock.now >= 1020 else None
    runtime, _ = job(slurm=slurm, hang_check=hang_check, hang_timeout=20.0)
    assert status(runtime) == 0
    assert slurm.killed - slurm.termed == pytest.approx(10, abs=0.5)


def test_a_node_slurm_took_down_during_the_last_run_is_counted_and_left_out(job, capsys):
    JobRecord(open_run=NODES, state="training").save(job.files.record)
    runtime, _ = job(component_0=exits(0, 1001), component_1=exits(0, 1001), slurm=Slurm(bad={"node3": "DOWN*"}))
    assert status(runtime) == 0
    assert "slurmgen: the last run of job 77 ended when node3 became DOWN*: failure 1 of at most 2; node3 is left" \
           " out of later runs" in capsys.readouterr().out
    assert record(job.files).excluded == ["node3"] and record(job.files).failures == [Failure("node", "node3")]


def test_a_warning_from_a_lost_node_retries_at_once(job, capsys):
    # 25.11 signals the batch script when a node of the job goes down (and cancels the job a few
    # seconds later, its NodeList already without the node): no checkpoint can be made
    slurm = Slurm(bad={"node3": "DOWN+NOT_RESPONDING"}, nodes=["node1", "node2", "node4"])
    job.files.stop.touch()
    runtime, _ = job(slurm=slurm)
    assert status(runtime) == 0
    out = capsys.readouterr().out
    assert "asking every rank to checkpoint" not in out
    assert "slurmgen: failure 1 of at most 2 (node on node3): requeueing job 77 to resume from its newest checkpoint;" \
           " excluding node3 (DOWN+NOT_RESPONDING)" in out
    assert slurm.requeued == ["77"] and slurm.excluded == ["node3"]
    assert record(job.files).open_run == []  # ended by the runtime: the next run counts it no more


def stops_with(outcome, status=0):
    """Ranks that save at the stop file and say so."""
    def behaviour(now):
        files = JobFiles.of(behaviour.folder, "77")
        if files.stop.exists():
            files.outcome.write_text(outcome + "\n")
            return status
        return None
    return behaviour


def warned_job(job, outcome, status=0, **kwargs):
    behaviour = stops_with(outcome, status)
    behaviour.folder = job.files.folder.parent
    job.files.stop.touch()  # the batch script's trap, at the warning
    return job(component_0=behaviour, component_1=behaviour, **kwargs)


def test_the_time_limit_warning_checkpoints_and_requeues(job, capsys):
    slurm = Slurm()
    runtime, _ = warned_job(job, "stopped 7", slurm=slurm)
    assert status(runtime) == 0
    out = capsys.readouterr().out
    assert "slurmgen: time limit or preemption warning: asking every rank to checkpoint" in out
    assert "slurmgen: checkpoint saved at step 7; requeueing job 77 (restart 1 of at most 3)" in out
    assert slurm.requeued == ["77"] and record(job.files).restarts == 1 and record(job.files).failures == []


def test_no_restart_left_ends_the_job_as_unfinished(job, capsys):
    JobRecord(restarts=1).save(job.files.record)
    slurm = Slurm()
    runtime, _ = warned_job(job, "stopped 7", slurm=slurm, max_restarts=1)
    assert status(runtime) == 1
    assert "slurmgen: training unfinished; not requeueing: 1 restart(s) used" in capsys.readouterr().err
    assert slurm.requeued == []


def test_preemption_waits_for_slurm_and_uses_no_restart(job, capsys):
    slurm = Slurm(preempted=True)
    runtime, _ = warned_job(job, "stopped 9", slurm=slurm, max_restarts=0)
    assert status(runtime) == 0
    assert "slurmgen: checkpoint saved at step 9; job 77 preempted: Slurm requeues it" in capsys.readouterr().out
    assert job.clock.slept[-1] == PREEMPTED_WAIT and slurm.requeued == [] and record(job.files).restarts == 0
    assert record(job.files).runs[-1].state == "preempted"


def test_a_crash_after_the_warning_is_not_a_checkpoint(job, capsys):
    """Before any beat: the code's own failure, not retried; the job ends with its status."""
    slurm = Slurm()
    runtime, _ = warned_job(job, "", status=5, slurm=slurm)
    assert status(runtime) == 5
    err = capsys.readouterr().err
    assert "ranks failed after the warning before saying their checkpoint was whole" in err
    assert "no rank had begun training" in err and slurm.requeued == []


def test_a_crash_after_the_warning_is_a_failure_retried_from_the_newest_checkpoint(job, capsys):
    """A rank that fails after the warning (a teardown abort, a crash while saving) before rank 0 said
    its checkpoint was whole: counted against --max-failures and requeued like any crash, to resume
    from the newest complete checkpoint; not the job's end (a CI run lost a time-limit job so)."""
    slurm = Slurm()
    crash = stops_with("", status=5)

    def trained_then_crashed(now):  # the ranks had beaten before the warning
        beats(job.files, 0, 1, 2)
        return crash(now)
    crash.folder = job.files.folder.parent
    job.files.stop.touch()
    runtime, _ = job(component_0=trained_then_crashed, component_1=trained_then_crashed, slurm=slurm)
    assert status(runtime) == 0
    out = capsys.readouterr()
    assert "failure 1 of at most 2 (crash): requeueing job 77 to resume from its newest checkpoint" in out.out
    assert slurm.requeued == ["77"] and record(job.files).failures == [Failure("crash", "")]
    assert record(job.files).restarts == 0  # a failure, not a time-limit restart


def test_training_that_finished_before_the_warning_is_not_requeued(job, capsys):
    slurm = Slurm()
    runtime, _ = warned_job(job, "finished 85", slurm=slurm)
    assert status(runtime) == 0
    assert "training finished before the warning could stop it" in capsys.readouterr().out
    assert slurm.requeued == []
    runtime, steps = job()  # Slurm requeues it once more (25.11, after a preemption): it ends at once
    assert status(runtime) == 0 and steps.started == []


def test_ranks_that_do_not_stop_are_stopped_after_the_stop_wait(job, capsys):
    job.files.stop.touch()
    runtime, _ = job(stop_wait=30.0)
    assert status(runtime) == 0
    assert "ranks did not stop within 30 s of the warning; stopping them" in capsys.readouterr().err
    assert 1030 < job.clock.now < 1035 + 30


def test_code_that_takes_no_stop_file_is_stopped_after_the_grace(job, capsys):
    job.files.stop.touch()
    runtime, _ = job(stop_grace=15.0)
    assert status(runtime) == 0
    captured = capsys.readouterr()
    assert "your code takes no stop file" in captured.err
    assert "requeueing job 77 (restart 1 of at most 3)" in captured.out


def report(host, trl="0.19"):
    return {"host": host, "python": "3.11", "torch": "2.13", "nccl": "-", "transformers": "5", "trl": trl,
            "datasets": "4", "gpus": "1 of 1"}


def test_a_node_whose_software_differs_is_left_out_at_once(job, capsys):
    slurm = Slurm()
    runtime, steps = job(slurm=slurm, preflight=True,
                         reports=[[report("node1"), report("node2")], [report("node3", "0.0.1"), report("node4")]])
    assert status(runtime) == 0
    out = capsys.readouterr().out
    assert "slurmgen: preflight failed; not starting training:" in out
    assert "slurmgen: failure 1 of at most 2 (preflight on node3): requeueing job 77 to resume from its newest" \
           " checkpoint; excluding node3 (preflight)" in out
    assert steps.started == ["preflight_step", "preflight_step"] and slurm.excluded == ["node3"]


def test_differences_on_several_nodes_end_the_job(job, capsys):
    slurm = Slurm()
    runtime, steps = job(slurm=slurm, preflight=True,
                         reports=[[report("node1", "1"), report("node2")], [report("node3", "0.0.1"), report("node4")]])
    assert status(runtime) == 1
    assert slurm.requeued == [] and "component_0" not in steps.started


def test_preflight_passes_and_training_starts(job, capsys):
    runtime, steps = job(component_0=exits(0, 1001), component_1=exits(0, 1001), preflight=True,
                         reports=[[report("node1"), report("node2")], [report("node3"), report("node4")]])
    assert status(runtime) == 0
    assert "slurmgen: preflight passed on 4 node(s)" in capsys.readouterr().out
    assert steps.started == ["preflight_step", "preflight_step", "component_0", "component_1"]
    assert not job.files.preflight.exists()


# ---- the user's decision: scancel is final ---------------------------------------------------------

def test_scancels_term_is_no_warning_the_job_ends_cancelled_and_is_never_requeued(job, capsys):
    """scancel: Slurm says CANCELLED, then TERMs the batch shell (its trap makes the stop file) and every
    rank. The ranks of a Trainer would stop cleanly at the stop file and say "stopped": no requeue."""
    slurm = Slurm(cancelled=True)
    runtime, _ = warned_job(job, "stopped 12", slurm=slurm)
    assert status(runtime) == 0 and runtime.run.state.value == "cancelled"
    out = capsys.readouterr().out
    assert "slurmgen: job 77 was cancelled (scancel): ending it, not requeueing it" in out
    assert "asking every rank to checkpoint" not in out and slurm.requeued == [] and record(job.files).restarts == 0


def test_a_plain_script_killed_by_scancel_is_no_failure_to_retry(job, capsys):
    """Its ranks die of scancel's TERM before the runtime reads the stop file: a crash, had the user not
    cancelled the job; nothing is counted, nothing requeued."""
    slurm = Slurm(cancelled=True)

    def killed(now):
        beats(job.files, 0, 1)
        return 143 if now >= 1003 else None
    runtime, _ = job(component_0=killed, component_1=killed, slurm=slurm)
    assert status(runtime) == 0
    assert "was cancelled (scancel)" in capsys.readouterr().out
    assert slurm.requeued == [] and record(job.files).failures == [] and record(job.files).state == "cancelled"


def test_slurmgen_cancel_during_the_checkpoint_refuses_the_requeue_the_warning_would_make(job, capsys):
    """`slurmgen cancel` marks the job's folder before its scancel reaches Slurm: ranks checkpointing at
    a time-limit warning stop ("stopped 7") while Slurm still says RUNNING; the mark alone ends it."""
    slurm = Slurm()
    saving = stops_with("stopped 7")

    def cancelled_while_saving(now):
        job.files.mark_cancelled(USER_CANCEL)
        return saving(now)
    saving.folder = job.files.folder.parent
    job.files.stop.touch()
    runtime, _ = job(component_0=cancelled_while_saving, component_1=saving, slurm=slurm)
    assert status(runtime) == 0 and runtime.run.state.value == "cancelled"
    assert "slurmgen: job 77 was cancelled (scancel): ending it, not requeueing it" in capsys.readouterr().out
    assert slurm.requeued == [] and record(job.files).restarts == 0 and record(job.files).state == "cancelled"


def test_a_crash_after_slurmgen_cancel_is_no_failure_to_requeue(job, capsys):
    slurm = Slurm()
    job.files.mark_cancelled(USER_CANCEL)
    runtime, _ = job(component_0=exits(1, 1003), slurm=slurm)
    assert status(runtime) == 0
    assert slurm.requeued == [] and record(job.files).failures == [] and record(job.files).state == "cancelled"


def stopped_by_a_term_to_the_steps(job, outcome, status):
    """Ranks that got a TERM this script never saw (scancel --signal=TERM JOB, a site's preemption):
    they save and say so, or die of it, without any stop file."""
    def behaviour(now):
        if now < 1003:
            return None
        beats(job.files, 0, 1)
        if outcome:
            job.files.outcome.write_text(outcome + "\n")
        return status
    return behaviour


@pytest.mark.parametrize("preempted", [True, False])
def test_ranks_that_saved_at_a_term_the_script_never_got_are_not_finished(job, capsys, preempted):
    """Every component exits 0 and the ranks say "stopped": unfinished training, judged as at a warning:
    a preemption is left to Slurm's requeue, anything else requeued to resume; never FINISHED."""
    slurm = Slurm(preempted=preempted)
    term = stopped_by_a_term_to_the_steps(job, "stopped 9", 0)
    runtime, _ = job(component_0=term, component_1=term, slurm=slurm)
    assert status(runtime) == 0
    out = capsys.readouterr().out
    assert "slurmgen: the ranks stopped at a signal this script never got (a TERM to the steps): as at a warning" in out
    if preempted:
        assert "slurmgen: checkpoint saved at step 9; job 77 preempted: Slurm requeues it" in out
        assert runtime.run.state.value == "preempted" and slurm.requeued == [] and record(job.files).restarts == 0
    else:
        assert "slurmgen: checkpoint saved at step 9; requeueing job 77 (restart 1 of at most 3)" in out
        assert slurm.requeued == ["77"] and record(job.files).restarts == 1
    assert record(job.files).failures == []


def test_ranks_a_preemptions_term_ended_are_no_failure(job, capsys):
    """A plain script's ranks die of the preemption's TERM (143), sent to the steps alone: Slurm
    requeues the job; the runtime counts nothing and requeues nothing itself."""
    slurm = Slurm(preempted=True)
    term = stopped_by_a_term_to_the_steps(job, "", 143)
    runtime, _ = job(component_0=term, component_1=term, slurm=slurm)
    assert status(runtime) == 0 and runtime.run.state.value == "preempted"
    assert "slurmgen: job 77 preempted (its ranks ended at its signal): no failure counted" in capsys.readouterr().out
    assert slurm.requeued == [] and record(job.files).failures == [] and record(job.files).restarts == 0


def test_a_preflight_that_does_not_answer_lets_training_start_with_one_line(job, capsys):
    """An srun stuck on a node that does not answer: past the check's budget (60 s and half a second a
    node) the steps are stopped and training starts; a failing check of a healthy cluster would itself
    be a misfire (issue 41, item 10)."""
    runtime, steps = job(component_0=exits(0, 1200), component_1=exits(0, 1200), preflight=True, reports=[])
    stuck = Proc(job.clock, running)
    steps.start = lambda function, *args, stdout=None: (steps.started.append(function) or
                                                        (stuck if function == "preflight_step" else
                                                         Proc(job.clock, steps.components[function])))
    assert status(runtime) == 0
    out = capsys.readouterr().out
    assert "slurmgen: preflight: not every node answered within 62 s; training starts without it" in out
    assert steps.started == ["preflight_step", "preflight_step", "component_0", "component_1"]
    assert stuck.rc == 143 and 1062 <= job.clock.now  # TERM at the budget's end


# torchrun's summary when rank 0 aborted in Python's exit (gloo's threads torn down in C++: SIGABRT)
ABORTED_AT_EXIT = """slurmgen: job 77
`Trainer.fit` stopped: `max_epochs=3` reached.
terminate called without an active exception
Root Cause (first observed failure):
[0]:
  time      : 2026-12-05_10:11:12
  host      : node1
  rank      : 0 (local_rank: 0)
  exitcode  : -6 (pid: 1234)
  error_file: <N/A>
  traceback : Signal 6 (SIGABRT) received by PID 1234
"""


def ended_then_aborted(job, *ranks):
    """Ranks that trained, whose scripts reached their end (train.script_end's marks), then a step that failed."""
    def behaviour(now):
        beats(job.files, *range(6))
        for rank in ranks:
            job.files.ended(rank).write_text(f"{rank} node1 99\n")
        return 1 if now >= 1003 else None
    return behaviour


def test_a_failure_after_every_rank_ended_its_script_is_a_finished_job(job, capsys):
    """Issue 41: a user's script that finished can abort in Python's exit (gloo, SIGABRT); torchrun fails the
    step, but the job had finished: no failure counted, never requeued."""
    slurm = Slurm(log=ABORTED_AT_EXIT)
    runtime, _ = job(component_0=exits(0, 1002), component_1=ended_then_aborted(job, *range(6)), slurm=slurm)
    assert status(runtime) == 0
    out = capsys.readouterr().out
    assert ("slurmgen: every rank ended its script; rank 0 was ended by SIGABRT in Python's exit after that (as gloo's"
            " 'terminate called without an active exception'): the job finished, not retried") in out
    assert slurm.requeued == [] and record(job.files).failures == [] and record(job.files).state == "finished"


def test_a_failure_when_a_rank_had_not_ended_its_script_is_a_crash_as_before(job, capsys):
    slurm = Slurm(log=ABORTED_AT_EXIT)
    runtime, _ = job(component_0=exits(0, 1002), component_1=ended_then_aborted(job, 0, 1, 2, 3, 4), slurm=slurm)
    assert status(runtime) == 0  # requeued
    out = capsys.readouterr().out
    assert "every rank ended its script" not in out
    assert "slurmgen: failure 1 of at most 2 (crash on node1): requeueing job 77" in out
    assert slurm.requeued == ["77"] and record(job.files).failures == [Failure("crash", "node1")]
