"""Spare nodes without Slurm: where each part of a component runs (slurmgen.job.spares), and the
runtime that restarts a failed run inside the allocation on a spare (slurmgen.job.replace), with the
fake clock, Slurm and steps of tests/test_job_runtime.py. tests/e2e/test_spares.py kills a node of a
real job."""
import json
import os

import pytest

from slurmgen.job.record import JobFiles, JobRecord
from slurmgen.job.replace import Spares
from slurmgen.job.runtime import Runtime
from slurmgen.job.spares import Part, Placement
from slurmgen.runtime_spec import Component
from tests.test_job_runtime import Clock, Proc, Slurm, beats, exits, job_of, report, running, status

LAYOUT = [(1, 2), (2, 2)]  # 1,1,2,2
GROUPS = [["node1", "node2"], ["node3", "node4"], ["node5"]]


def test_each_component_runs_on_its_own_nodes_until_one_is_replaced():
    placement = Placement(LAYOUT, GROUPS)
    assert placement.parts(0) == [Part(0, ("node1", "node2"), 0, 0)]
    assert placement.parts(1) == [Part(1, ("node3", "node4"), 2, 2)]
    assert placement.replace({"node3"}) == [("node3", "node5")]
    # node4 takes node rank 2 (ranks 2,3), the spare node rank 3 (ranks 4,5), in its own het group
    assert placement.parts(1) == [Part(1, ("node4",), 2, 2), Part(2, ("node5",), 3, 4)]
    assert placement.parts(1)[1].args() == ["2", "1", "3", "4", "node5"]
    assert placement.nodes() == ["node1", "node2", "node4", "node5"] and placement.free == []
    assert placement.dump_groups() == [("0", 2, "node1,node2"), ("1", 1, "node4"), ("2", 1, "node5")]


def test_a_spare_stands_in_for_a_node_of_any_component_and_runs_out():
    placement = Placement(LAYOUT, [["node1", "node2"], ["node3", "node4"], ["node6", "node5"]])
    assert placement.replace({"node2"}) == [("node2", "node6")]
    assert placement.parts(0) == [Part(0, ("node1",), 0, 0), Part(2, ("node6",), 1, 1)]
    assert placement.replace({"node4", "node5"}) is None  # node5 is bad too: no spare left for node4
    assert placement.parts(1) == [Part(1, ("node3", "node4"), 2, 2)] and placement.free == []


class Steps:
    """Records each start with its arguments; probe_step answers per node (exit status, or None: no answer)."""

    def __init__(self, clock, behaviours, probes, reports=()):
        self.clock, self.behaviours, self.probes, self.reports = clock, behaviours, probes, list(reports)
        self.started = []

    def start(self, function, *args, stdout=None):
        self.started.append((function, *args))
        if function == "preflight_step":
            stdout.write("".join("SLURMGEN_PREFLIGHT " + json.dumps(r) + "\n" for r in self.reports.pop(0)))
            stdout.flush()
            return Proc(self.clock, lambda now: 0)
        if function == "net_check_step":  # each group's nodes' lines, from self.net (ring(...) of test_slow_nodes)
            first, count = int(args[1]), len(self.groups[int(args[0])])
            stdout.write("".join("SLURMGEN_NETCHECK " + json.dumps(r) + "\n" for r in self.net[first:first + count]))
            stdout.flush()
            return Proc(self.clock, lambda now: 0)
        if function == "probe_step":  # a status, None (no answer), or a list of behaviours, one per probe
            status = self.probes.get(args[1], 0)
            if isinstance(status, list):
                return Proc(self.clock, status.pop(0))
            return Proc(self.clock, lambda now: status)
        return Proc(self.clock, self.behaviours[function].pop(0) if self.behaviours[function] else running)


@pytest.fixture
def spare_job(tmp_path):
    files = JobFiles.of(tmp_path, "77")
    files.folder.mkdir(parents=True)
    clock = Clock()

    def make(behaviours, probes=None, slurm=None, groups=GROUPS, reports=(), net=(), hang_check=None):
        components = (Component("component 0 (2 node(s) x 1 GPU)", 2, 1, "component_0"),
                      Component("component 1 (2 node(s) x 2 GPUs)", 2, 2, "component_1"))
        job = job_of(files, components, spares=1, preflight=bool(reports), net_check=(0.5, 0.0) if net else None,
                     hang_timeout=20.0 if hang_check else 0)
        steps = Steps(clock, behaviours, probes or {}, reports)
        steps.net, steps.groups = list(net), groups
        spares = Spares(Placement(LAYOUT, groups), steps, clock, clock.sleep, os.environ.get("SLURMD_NODENAME", ""))
        runtime = Runtime(job, steps, clock=clock, sleep=clock.sleep, slurm_api=slurm or Slurm(),
                          nodes=[n for g in groups for n in g], hang_check=hang_check, spares=spares)
        runtime.placement = spares.placement
        return runtime, steps
    make.files, make.clock = files, clock
    return make


def test_a_lost_node_is_replaced_and_training_restarts_inside_the_allocation(spare_job, capsys):
    files, slurm = spare_job.files, Slurm()

    def fails_after_beats(now):  # the ranks beat, then node3 goes: component 1 fails
        beats(files, 0, 1, 2)
        return 1 if now >= 1005 else None
    runtime, steps = spare_job({"component_0": [exits(1, 1006), exits(0, 1100)],
                                "component_1": [fails_after_beats, exits(0, 1100), exits(0, 1100)]},
                               probes={"node3": None}, slurm=slurm)
    assert status(runtime) == 0
    out = capsys.readouterr().out
    assert "slurmgen: failure 1 of at most 2 (node on node3): restarting every component inside the allocation" \
           " from the newest checkpoint; node3 (no step started in 10 s) replaced by spare node5" in out, out
    launches = [s for s in steps.started if s[0] != "probe_step"]
    assert launches == [("component_0", "0", "2", "0", "0", "node1,node2"), ("component_1", "1", "2", "2", "2", "node3,node4"),
                        ("component_0", "0", "2", "0", "0", "node1,node2"), ("component_1", "1", "1", "2", "2", "node4"),
                        ("component_1", "2", "1", "3", "4", "node5")]
    assert {s[2] for s in steps.started if s[0] == "probe_step"} == {f"node{i}" for i in range(1, 6)}
    saved = JobRecord.load(files.record)
    assert slurm.requeued == [] and saved.state == "finished" and saved.excluded == ["node3"]
    assert [r.state for r in saved.runs] == ["restarted", "finished"] and [f.node for f in saved.failures] == ["node3"]


class Cancelling(Slurm):
    """A controller that answers: the stop's TERM goes to every step of the job, probes included."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.signalled_at = None

    def signal_steps(self, job):
        self.signalled_at = self.signalled_at or 1.0
        return True


def test_a_probe_cancelled_by_the_runtimes_own_stop_is_asked_again_not_taken_for_a_lost_node(spare_job, capsys):
    """A hang is stopped at once, while the probes it started are still being launched: the stop's
    scancel reaches node1's probe too, which fails (the cancel seen before the probe's exit). node1
    runs the batch script: taken for lost, it would turn the spare's restart into a requeue
    (tests/e2e/test_spares.py saw it once in five CI runs)."""
    slurm = Cancelling()

    def cancelled_by_the_stop(now):
        return 143 if slurm.signalled_at else None

    hung = []

    def hang_check(**_):  # rank 3 stops at 1020, in the first run only
        beats(spare_job.files, 0, 1, 2, 3)
        if spare_job.clock.now < 1020 or hung:
            return None
        hung.append(spare_job.clock.now)
        return ["rank 3 on node3 is stuck"], "node3"
    runtime, steps = spare_job({"component_0": [running, exits(0, 1100)],
                                "component_1": [running, exits(0, 1100), exits(0, 1100)]},
                               probes={"node1": [cancelled_by_the_stop, lambda now: 0]}, slurm=slurm,
                               hang_check=hang_check)
    assert status(runtime) == 0
    out = capsys.readouterr().out
    assert "slurmgen: probing node1 again: the stop of the old steps may have cancelled the first probe" in out, out
    assert "(hang on node3): restarting every component inside the allocation from the newest checkpoint;" \
           " node3 (hang) replaced by spare node5" in out, out
    assert slurm.requeued == [] and runtime.record.excluded == ["node3"]
    assert [s[2] for s in steps.started if s[0] == "probe_step"].count("node1") == 2


def test_a_crash_blamed_on_a_node_takes_the_spare_at_once(spare_job, capsys):
    slurm = Slurm(log="slurmgen: job 77\nsrun: error: node4: task 1: Exited with exit code 13\n")

    def crash(now):
        beats(spare_job.files, 0)
        return 13 if now >= 1003 else None
    runtime, _ = spare_job({"component_0": [running, exits(0, 1100)],
                            "component_1": [crash, exits(0, 1100), exits(0, 1100)]}, slurm=slurm)
    assert status(runtime) == 0
    assert "(crash on node4): restarting every component inside the allocation from the newest checkpoint;" \
           " node4 (crash) replaced by spare node5" in capsys.readouterr().out


def test_a_crash_on_the_batch_node_is_requeued_not_given_to_a_spare(spare_job, capsys, monkeypatch):
    """node1 runs the batch script and hosts the rendezvous (rank 0): a spare cannot take its place."""
    monkeypatch.setenv("SLURMD_NODENAME", "node1")
    slurm = Slurm(log="slurmgen: job 77\nsrun: error: node1: task 0: Exited with exit code 13\n")

    def crash(now):
        beats(spare_job.files, 0)
        return 13 if now >= 1003 else None
    runtime, _ = spare_job({"component_0": [crash], "component_1": [running]}, slurm=slurm)
    assert status(runtime) == 0
    assert "failure 1 (crash on node1): node1 runs the batch script and the rendezvous, which no spare can take" \
           " over; requeueing instead" in capsys.readouterr().out
    assert slurm.requeued == ["77"] and runtime.placement.free == ["node5"]


def test_with_no_spare_left_the_job_is_requeued_without_the_node(spare_job, capsys):
    slurm = Slurm(bad={"node3": "DOWN+NOT_RESPONDING", "node5": "DOWN"})

    def fails(now):
        beats(spare_job.files, 0)
        return 1 if now >= 1003 else None
    runtime, _ = spare_job({"component_0": [running], "component_1": [fails]}, slurm=slurm)
    assert status(runtime) == 0
    out = capsys.readouterr()
    assert "failure 1 (node on node3): no spare node left; requeueing instead" in out.out
    assert slurm.requeued == ["77"] and "node3" in slurm.excluded


def test_preflight_looks_at_the_spares_too(spare_job, capsys):
    runtime, steps = spare_job({"component_0": [exits(0, 1001)], "component_1": [exits(0, 1001)]},
                               reports=[[report("node1"), report("node2")], [report("node3"), report("node4")],
                                        [report("node5")]])
    assert status(runtime) == 0
    assert "slurmgen: preflight passed on 5 node(s)" in capsys.readouterr().out
    assert [s[:2] for s in steps.started if s[0] == "preflight_step"] == [("preflight_step", str(i)) for i in range(3)]


def test_the_submit_path_refuses_spares_in_one_line():
    from slurmgen.plan.spec import JobSpec as Request
    from slurmgen.plan.words import SpecError
    from slurmgen.submit import parameters

    with pytest.raises(SpecError, match=r"^--spares 1: python -m slurmgen.submit keeps no spare nodes \(its retries"
                                        r" submit again\); use slurmgen render$"):
        parameters.check_submittable(Request(gpus=(1,), spares=1))


def test_after_a_replacement_a_time_limit_warning_requeues_without_the_replaced_node(spare_job, capsys):
    """The replaced node is down for good: the warning that comes later is the time limit's, and the
    requeued job leaves the node out."""
    files, slurm = spare_job.files, Slurm(bad={})

    def lost(now):  # node3 goes at 1005; from then on Slurm says so
        beats(files, 0, 1, 2)
        if now >= 1005:
            slurm.bad = {"node3": "DOWN+NOT_RESPONDING"}
            return 1
        return None

    def warned(now):  # the time-limit warning at 1100: rank 0 checkpoints and the ranks stop
        if now >= 1100 and not files.stop.exists():
            files.stop.write_text("")
        if now >= 1110:
            files.outcome.write_text("stopped 40")
            return 0
        return None
    runtime, _ = spare_job({"component_0": [exits(1, 1006), warned], "component_1": [lost, warned, warned]},
                           probes={"node3": 1}, slurm=slurm)
    assert status(runtime) == 0
    out = capsys.readouterr().out
    assert "replaced by spare node5" in out and "requeueing job 77 (restart 1 of at most 3)" in out, out
    assert slurm.requeued == ["77"] and slurm.excluded == ["node3"]
    assert [f.node for f in JobRecord.load(files.record).failures] == ["node3"]  # the warning is no failure


def test_a_slow_link_found_before_training_is_swapped_for_the_spare(spare_job, capsys):
    """The network check names node3: the spare takes its place before any training, no failure is
    counted, no requeue; component 1 runs on node4 and the spare, with node3's ranks on the spare."""
    from tests.test_slow_nodes import ring

    slurm = Slurm()
    runtime, steps = spare_job({"component_0": [exits(0, 1005)], "component_1": [exits(0, 1005), exits(0, 1005)]},
                               slurm=slurm, net=ring({"node1": 1.6, "node2": 1.5, "node3": 0.01, "node4": 1.1,
                                                      "node5": 1.4}))
    assert status(runtime) == 0
    out = capsys.readouterr().out
    assert "slurmgen: slow link: node3" in out and "slurmgen: node3 replaced by spare node5 before training" in out
    launches = [s for s in steps.started if s[0].startswith("component_")]
    assert launches == [("component_0", "0", "2", "0", "0", "node1,node2"), ("component_1", "1", "1", "2", "2", "node4"),
                        ("component_1", "2", "1", "3", "4", "node5")], launches
    assert slurm.requeued == [] and runtime.record.failures == [] and runtime.record.excluded == ["node3"]
    assert runtime.record.runs[-1].nodes == ["node1", "node2", "node4", "node5"]


def test_a_slow_spare_is_left_idle_and_training_starts_on_the_job_s_own_nodes(spare_job, capsys):
    from tests.test_slow_nodes import ring

    runtime, steps = spare_job({"component_0": [exits(0, 1005)], "component_1": [exits(0, 1005)]},
                               net=ring({"node1": 1.6, "node2": 1.5, "node3": 1.2, "node4": 1.1, "node5": 0.01}))
    assert status(runtime) == 0
    assert "slurmgen: spare node5 is slow: left idle for good" in capsys.readouterr().out
    assert [s[:2] for s in steps.started if s[0].startswith("component_")] == [("component_0", "0"), ("component_1", "1")]
    assert runtime.placement.free == []
