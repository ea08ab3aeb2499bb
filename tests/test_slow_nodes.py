"""Slow nodes (issue 30) without a cluster: the network check's verdict from the nodes' lines, the
straggler watch's from the beats, the runtime's answer to each, and the ranks' compute time."""
from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import textwrap

from slurmgen.job import net_check, preflight, stragglers
from slurmgen.job.hangs import Beat, read_beats
from slurmgen.job.record import JobFiles
from slurmgen.job.runtime import Runtime
from slurmgen.job.states import State
from slurmgen.runtime_spec import Component, StragglerRule
from tests.test_job_runtime import NODES, Clock, Proc, Slurm, Steps, exits, job_of, status, stops_with


def ring(gbps: dict[str, float], latency: float = 0.1) -> list[dict]:
    """Each node's line as net_measure.py prints it, where a transfer runs at the slower end's rate."""
    hosts = list(gbps)
    n = len(hosts)
    lines = []
    for r, host in enumerate(hosts):
        before, following = hosts[(r - 1) % n], hosts[(r + 1) % n]
        lines.append({"host": host, "rank": r, "backend": "gloo",
                      "from_before": [latency, min(gbps[before], gbps[host])],
                      "from_following": [latency, min(gbps[following], gbps[host])],
                      "all_reduce_ms": [[4096, 1.0], [33554432, 80.0]]})
    return lines


def test_the_node_whose_every_transfer_is_slow_is_named_not_its_neighbours():
    found = net_check.verdict(ring({"node1": 1.6, "node2": 1.5, "node3": 0.01, "node4": 1.1}), 4, 0.5, 0, 5.0)
    assert found.slow == ["node3"]
    assert found.lines[0] == "slurmgen: network check of 4 node(s) (gloo) took 5.0 s:"
    assert found.lines[1].split() == ["node", "rank", "send", "GB/s", "receive", "GB/s", "latency", "ms"]
    assert found.lines[4].split() == ["node3", "2", "0.01", "0.01", "0.10"]
    assert found.lines[-1] == ("slurmgen: slow link: node3: 0.01 GB/s sending against a median of 1.30 GB/s"
                               " (below 0.5 of it)")
    assert "all-reduce: 4 KB 1.0 ms, 32 MB 80.0 ms (bus bandwidth 0.63 GB/s)" in found.lines[-2]


def test_the_measurement_runs_as_the_nodes_run_it_and_judges_a_healthy_loopback(tmp_path):
    """net_measure.py as the job's step runs it (python -c SOURCE FIRST WORLD, one task per node),
    three processes on this machine over gloo: one line each, every link measured, nothing named."""
    from pathlib import Path

    from tests.train_fixtures import free_port

    source = (Path(net_check.__file__).parent / "net_measure.py").read_text()
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), TORCH_CPP_LOG_LEVEL="ERROR")
    procs = [subprocess.Popen([sys.executable, "-c", source, "0", "3"], stdout=subprocess.PIPE, text=True,
                              env={**env, "SLURM_PROCID": str(r), "SLURMD_NODENAME": f"node{r + 1}"}) for r in range(3)]
    out = "".join(p.communicate(timeout=120)[0] for p in procs)
    assert [p.returncode for p in procs] == [0, 0, 0], out
    (tmp_path / "check.log").write_text(out)
    reports = preflight.read_reports(tmp_path / "check.log", net_check.TAG)
    assert sorted(r["host"] for r in reports) == ["node1", "node2", "node3"]
    assert all(r["backend"] == "gloo" and r["from_before"][1] > 0 and r["from_following"][1] > 0 for r in reports)
    assert [size for size, _ in reports[0]["all_reduce_ms"]][:2] == [4096, 262144]
    found = net_check.verdict(reports, 3, 0.1, 0, 3.0)
    assert found.slow == [] and len(found.figures) == 3, found.lines
    assert re.fullmatch(r"  measured over: ring gloo, TCP on \S+; all-reduce gloo, TCP on \S+", found.lines[5]), found.lines


def test_the_check_names_nccls_transport_and_says_when_it_is_not_the_fabric():
    """On a GPU node the all-reduce ladder runs over NCCL, whose own log names its network (IB, or its
    TCP sockets when it does not see the fabric): the verdict says which, and what Socket means."""
    reports = ring({"a": 1.6, "b": 1.5, "c": 1.4})
    for report in reports:
        report["transport"] = {"ring": "gloo, TCP on ib0", "all_reduce": "nccl, network IB (NET/IB/0)"}
    assert "  measured over: ring gloo, TCP on ib0; all-reduce nccl, network IB (NET/IB/0)" in \
        net_check.verdict(reports, 3, 0.5, 0, 5.0).lines
    for report in reports:
        report["transport"]["all_reduce"] = "nccl, network Socket (NET/Socket/0)"
    assert ("  measured over: ring gloo, TCP on ib0; all-reduce nccl, network Socket (NET/Socket/0) (NCCL's TCP"
            " sockets: on an InfiniBand site, NCCL does not see the fabric here)") in \
        net_check.verdict(reports, 3, 0.5, 0, 5.0).lines


def test_a_healthy_spread_and_two_nodes_raise_no_alarm():
    assert net_check.verdict(ring({"a": 1.6, "b": 0.9, "c": 1.2, "d": 1.0}), 4, 0.5, 0, 5.0).slow == []
    two = net_check.verdict(ring({"a": 1.6, "b": 0.01}), 2, 0.5, 1.0, 5.0)  # the ratio cannot tell: only a floor
    assert two.slow == [] and "with two nodes it cannot be told which one" in two.lines[-1]


def test_a_floor_names_a_node_the_ratio_would_not():
    found = net_check.verdict(ring({"a": 1.6, "b": 1.5, "c": 0.9, "d": 1.4}), 4, 0.5, 1.0, 5.0)
    assert found.slow == ["c"] and found.lines[-1] == "slurmgen: slow link: c: 0.90 GB/s, below the floor of 1 GB/s (--net-min-gbps)"


def test_a_node_missing_from_the_check_is_said_and_not_judged():
    found = net_check.verdict(ring({"a": 1.6, "b": 1.5, "c": 0.01})[:2], 3, 0.5, 0, 5.0)
    assert found.slow == [] and found.lines == ["slurmgen: network check: 2 of 3 node(s) reported; not judged (the"
                                                " nodes' own output is in the job log)"]


def beats(computes: dict[int, float]) -> dict[int, Beat]:
    return {r: Beat(r, 60, 1000.0, f"node{r // 2 + 1}", 100 + r, 0.0, c) for r, c in computes.items()}


def test_a_rank_far_over_the_others_median_is_a_straggler():
    found = stragglers.slow_ranks(beats({0: 0.010, 1: 0.012, 2: 0.025, 3: 0.011}), 2.0)
    assert [(s.rank, s.host, round(s.ratio, 2)) for s in found] == [(2, "node2", 2.27)]
    assert found[0].line(50) == "slurmgen: straggler: rank 2 on node2: 2.3x the median compute time per step over the last 50 steps"
    assert stragglers.slow_ranks(beats({0: 0.010, 1: 0.012, 2: 0.019, 3: 0.011}), 2.0) == []
    assert stragglers.slow_ranks(beats({0: 0.010, 1: 0.0, 2: 0.05}), 2.0) == []  # a window not yet full


def test_beats_carry_the_compute_figure_beside_a_save(tmp_path):
    (tmp_path / "node-node1").write_text("0 5 1000.0 node1 11 save 600 compute 0.012\n1 5 1000.0 node1 12 compute 0.5\n")
    got = read_beats(tmp_path)
    assert (got[0].save_allowance, got[0].compute, got[1].save_allowance, got[1].compute) == (600.0, 0.012, 0.0, 0.5)


# ---- the runtime's answers ------------------------------------------------------------------

class NetSteps(Steps):
    """Steps whose network check prints the lines of ring(GBPS): each group its nodes' lines."""

    def __init__(self, clock, files, components, gbps):
        super().__init__(clock, files, components)
        self.lines = ring(gbps)

    def start(self, function, *args, stdout=None):
        if function != "net_check_step":
            return super().start(function, *args, stdout=stdout)
        self.started.append(function)
        first = int(args[1])
        for line in self.lines[first:first + 2]:  # two nodes per component
            stdout.write("SLURMGEN_NETCHECK " + json.dumps(line) + "\n")
        stdout.flush()
        return Proc(self.clock, lambda now: 0)


def runtime(tmp_path, components, gbps=None, straggler_check=None, slurm=None, **settings):
    files = JobFiles.of(tmp_path, "77")
    files.folder.mkdir(parents=True, exist_ok=True)
    clock = Clock()
    job = job_of(files, (Component("component 0", 2, 1, "component_0"), Component("component 1", 2, 2, "component_1")),
                 **settings)
    steps = NetSteps(clock, files, components, gbps or {})
    return Runtime(job, steps, clock=clock, sleep=clock.sleep, slurm_api=slurm or Slurm(), nodes=NODES,
                   straggler_check=straggler_check)


def test_a_slow_link_requeues_the_job_without_its_node(tmp_path, capsys):
    slurm = Slurm()
    rt = runtime(tmp_path, {}, {"node1": 1.6, "node2": 1.5, "node3": 0.01, "node4": 1.1}, slurm=slurm,
                 net_check=(0.5, 0.0))
    assert status(rt) == 0 and rt.run.state == State.REQUEUED
    out = capsys.readouterr().out
    assert "slurmgen: slow link: node3" in out
    assert "failure 1 of at most 2 (slow on node3): requeueing job 77 to resume from its newest checkpoint;" \
           " excluding node3 (slow)" in out
    assert slurm.excluded == ["node3"] and rt.record.runs[-1].network["node3"] == [0.01, 0.01, 0.1]
    assert "component_0" not in rt.steps.started  # no training on it


def test_a_slow_link_that_cannot_be_left_out_is_trained_on(tmp_path, capsys):
    rt = runtime(tmp_path, {"component_0": exits(0, 1005), "component_1": exits(0, 1005)},
                 {"node1": 1.6, "node2": 1.5, "node3": 0.01, "node4": 1.1}, slurm=Slurm(fits=False), net_check=(0.5, 0.0))
    assert status(rt) == 0 and rt.run.state == State.FINISHED
    assert "slurmgen: training on node3 all the same" in capsys.readouterr().out


def test_a_straggler_with_exclude_stops_the_run_at_a_checkpoint_and_requeues_without_its_node(tmp_path, capsys):
    slurm = Slurm()
    behaviour = stops_with("stopped 40")
    behaviour.folder = tmp_path
    rt = runtime(tmp_path, {"component_0": behaviour, "component_1": behaviour},
                 straggler_check=lambda beats: ([stragglers.Straggler(2, "node3", 3.1)], {"node1": 0.01, "node3": 0.031}), slurm=slurm,
                 stragglers=StragglerRule(2.0, 10, "exclude"))
    assert status(rt) == 0 and rt.run.state == State.REQUEUED
    out = capsys.readouterr().out
    assert "slurmgen: straggler: rank 2 on node3: 3.1x the median compute time per step over the last 10 steps" in out
    assert "slurmgen: straggler: asking every rank to checkpoint, to go on without node3" in out
    assert "failure 1 of at most 2 (slow on node3)" in out and slurm.excluded == ["node3"]
    assert rt.record.runs[-1].stragglers == {"node3": 3.1}
    assert rt.record.runs[-1].compute == {"node1": 0.01, "node3": 0.031}


def test_a_straggler_with_warn_is_named_once_and_training_goes_on(tmp_path, capsys):
    rt = runtime(tmp_path, {"component_0": exits(0, 1030), "component_1": exits(0, 1030)},
                 straggler_check=lambda beats: ([stragglers.Straggler(2, "node3", 3.1)], {}),
                 stragglers=StragglerRule(2.0, 10, "warn"))
    assert status(rt) == 0 and rt.run.state == State.FINISHED
    assert capsys.readouterr().out.count("slurmgen: straggler: rank 2 on node3") == 1


def test_a_straggler_whose_node_cannot_be_left_out_is_only_named(tmp_path, capsys):
    rt = runtime(tmp_path, {"component_0": exits(0, 1030), "component_1": exits(0, 1030)},
                 straggler_check=lambda beats: ([stragglers.Straggler(2, "node3", 3.1)], {}), slurm=Slurm(fits=False),
                 stragglers=StragglerRule(2.0, 10, "exclude"))
    assert status(rt) == 0 and rt.run.state == State.FINISHED
    assert "slurmgen: straggler: training on with node3" in capsys.readouterr().out


# ---- the ranks' side -----------------------------------------------------------------------

SLOW_FORWARD = textwrap.dedent("""
    import sys, time, torch
    from train import compute_time
    compute_time.install()
    SLEEPS = [float(s) for s in sys.argv[1].split(",")]  # each step's forward sleeps this long

    class Slow(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(2, 1)
        def forward(self, x):
            time.sleep(self.sleep)
            return self.lin(x)

    model, figures, forwards = Slow(), [], []
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for sleep in SLEEPS:
        model.sleep = sleep
        began = time.monotonic()
        out = model(torch.ones(1, 2))
        forwards.append(time.monotonic() - began)  # the forward as the loop sees it, hooks included
        out.sum().backward()
        with torch.no_grad():  # an evaluation forward: as long again, not to be counted
            model(torch.ones(1, 2))
        opt.step()
        figures.append(compute_time.figure())
    print(figures, forwards)
""")


def forward_figures(sleeps: list[float], window: int) -> tuple[list, list]:
    """(the figure after each step, each forward as the loop timed it) of a plain loop under the rank
    hooks' module whose forward sleeps sleeps[step]."""
    env = dict(os.environ, SLURMGEN_STRAGGLER_WINDOW=str(window))
    out = subprocess.run([sys.executable, "-c", SLOW_FORWARD, ",".join(map(str, sleeps))], env=env,
                         capture_output=True, text=True, check=True).stdout
    return eval(out.replace("] [", "], ["))


def test_a_ranks_compute_time_is_its_forward_passes_median_over_the_window():
    """A forward that sleeps 20 ms is timed, a no-grad forward (evaluation) is not, and the figure
    appears once the window is full."""
    figures, forwards = forward_figures([0.02] * 6, window=4)
    assert figures[:3] == [None, None, None], figures
    for step in (3, 4, 5):  # each timed forward slept 20 ms and lies inside the loop's own timing of
        # it; the evaluation forward's 20 ms counted too would put the figure above that timing
        assert 0.02 <= figures[step] <= statistics.median(forwards[step - 3:step + 1]), (figures, forwards)


def test_a_few_stalled_forwards_do_not_make_a_slow_rank_and_a_slow_one_stays_slow():
    """A healthy rank on a busy host: 3 of 10 forwards stalled 300 ms (the kernel ran another
    process); its figure stays near its 20 ms, where their mean, 104 ms, is 5.2 times that. A rank
    slow at every step (a throttled node) keeps its figure."""
    figures, _ = forward_figures([0.02, 0.3, 0.02, 0.02, 0.3, 0.02, 0.02, 0.02, 0.3, 0.02], window=10)
    assert 0.02 <= figures[-1] < 0.04, figures
    figures, _ = forward_figures([0.1] * 10, window=10)
    assert figures[-1] >= 0.1, figures


def test_without_the_window_nothing_is_timed():
    code = "from train import compute_time; compute_time.install(); import sys; print('torch' in sys.modules, compute_time.figure())"
    env = {k: v for k, v in os.environ.items() if k != "SLURMGEN_STRAGGLER_WINDOW"}
    assert subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          check=True).stdout.split() == ["False", "None"]


def test_the_submit_path_refuses_to_exclude_stragglers_in_one_line():
    import pytest

    from slurmgen.plan.slow_nodes import SlowNodes
    from slurmgen.plan.spec import JobSpec as Request
    from slurmgen.plan.words import SpecError
    from slurmgen.submit import parameters

    with pytest.raises(SpecError, match=r"^--straggler-action exclude: python -m slurmgen.submit watches for hangs,"
                                        r" not stragglers, and runs no network check; use slurmgen render$"):
        parameters.check_submittable(Request(gpus=(1,), slow_nodes=SlowNodes(straggler_action="exclude")))


def test_on_mixed_gpu_types_a_rank_is_judged_against_its_own_kind():
    """--gpu-type a100,a100,h100,h100: the A100 ranks are 2.5x the H100s' compute time, and healthy; a
    slow H100 is still named (issue 41, item 9)."""
    from slurmgen.job.hangs import Beat
    from slurmgen.job.stragglers import rank_kinds, slow_ranks
    from slurmgen.runtime_spec import Component

    components = (Component("component 0", 2, 1, "component_0", "a100"), Component("component 1", 2, 2, "component_1", "h100"))
    kinds = rank_kinds(components)
    assert kinds == {0: "a100", 1: "a100", 2: "h100", 3: "h100", 4: "h100", 5: "h100"}
    times = {0: 0.05, 1: 0.05, 2: 0.02, 3: 0.02, 4: 0.02, 5: 0.02}
    hosts = {0: "node1", 1: "node2", 2: "node3", 3: "node3", 4: "node4", 5: "node4"}
    beats = {r: Beat(r, 9, 1.0, hosts[r], 99, 0.0, t) for r, t in times.items()}
    assert [s.rank for s in slow_ranks(beats, 2.0)] == [0, 1]  # against everyone: the A100s "straggle"
    assert slow_ranks(beats, 2.0, kinds) == []
    beats[3] = Beat(3, 9, 1.0, "node3", 99, 0.0, 0.06)  # a throttled H100
    assert [(s.rank, round(s.ratio, 1)) for s in slow_ranks(beats, 2.0, kinds)] == [(3, 3.0)]
    assert rank_kinds(components[:1]) == {}  # one kind: everyone is everyone's peer, as before
