"""--gpus auto without a cluster: the choice over recorded and random cluster states."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurmgen.site import auto_layout as al

RECORDED = (Path(__file__).resolve().parents[1] / "bench" / "data" / "scontrol_node_line.txt").read_text()


def node(name, gpus, used=0, state="IDLE", cpus=16, cpus_used=0, mem=32000, mem_used=0, partitions=("debug",)):
    return al.NodeState(name, partitions, gpus, used, cpus, cpus_used, mem, mem_used, state)


ONE_ONE_TWO_TWO = [node("node1", 1), node("node2", 1), node("node3", 2), node("node4", 2)]


def request(**kw):
    return al.Request(partition="debug", cpus_per_gpu=2, **kw)


def test_a_recorded_scontrol_line_parses():
    (n,) = al.parse_nodes(RECORDED)
    assert n.name == "node3" and n.gpus == 2 and n.partitions == ("debug", "urgent")
    assert n.cpus == 16 and n.mem_mb == 32000 and n.state


def test_an_idle_1_1_2_2_cluster_gives_1_1_2_2():
    choice = al.choose(ONE_ONE_TWO_TWO, request(world_size=6))
    assert (choice.counts, choice.nodes) == ((1, 1, 2, 2), ("node1", "node2", "node3", "node4"))


def test_a_gpu_in_use_is_left_out():
    nodes = [node("node1", 1), node("node2", 1), node("node3", 2, used=1, state="MIXED"), node("node4", 2)]
    choice = al.choose(nodes, request(world_size=5))
    assert dict(zip(choice.nodes, choice.counts)) == {"node1": 1, "node2": 1, "node3": 1, "node4": 2}
    assert ("node3", "1 of 2 GPUs in use: 1 usable") in choice.skipped


def test_a_drained_node_is_skipped_and_named():
    nodes = [node("node1", 1), node("node2", 1, state="IDLE+DRAIN"), node("node3", 2), node("node4", 2)]
    choice = al.choose(nodes, request(world_size=5))
    assert (choice.counts, choice.nodes) == ((1, 2, 2), ("node1", "node3", "node4"))
    assert choice.skipped == (("node2", "idle+drain"),)
    assert al.explain(choice).splitlines() == [
        "--gpus auto: 1,2,2 on node[1,3-4] (world size 5, from the GPUs free now)", "  node2: idle+drain"]


def test_too_many_gpus_says_what_is_missing_and_the_closest_fit():
    with pytest.raises(al.NoFit) as err:
        al.choose(ONE_ONE_TWO_TWO, request(world_size=7))
    assert str(err.value) == ("--world-size 7: 6 GPU(s) are free now (node1: 1, node2: 1, node3: 2, node4: 2);"
                              " the closest layout that fits now: --world-size 6 (1,1,2,2 on node1,node2,node3,node4)")


def test_cpus_memory_constraint_and_partition_limit_the_offer():
    nodes = [node("a1", 4, cpus=16, cpus_used=12), node("a2", 4, mem=32000, mem_used=24000),
             node("a3", 4, partitions=("other",)), node("a4", 4)]
    req = al.Request(partition="debug", cpus_per_gpu=2, mem_per_gpu_mb=4000, max_gpus=100)
    assert [al.free_gpus(n, req)[0] for n in nodes] == [2, 2, 0, 4]
    assert al.choose(nodes, req).world_size == 8
    assert al.free_gpus(nodes[3], al.Request(constraint="a100", max_gpus=1)) == (0, "lacks feature a100")


def test_max_gpus_takes_what_is_free_and_min_gpus_refuses():
    assert al.choose(ONE_ONE_TWO_TWO, request(max_gpus=4)).counts == (2, 2)
    with pytest.raises(al.NoFit, match=r"--min-gpus 8: only 6 GPU\(s\) are free now"):
        al.choose(ONE_ONE_TWO_TWO, request(max_gpus=16, min_gpus=8))


clusters = st.lists(st.tuples(st.integers(0, 8), st.integers(0, 8), st.sampled_from(["IDLE", "MIXED", "DOWN", "DRAIN"])),
                    min_size=1, max_size=24)


@settings(max_examples=300, deadline=None)
@given(clusters, st.integers(1, 40), st.one_of(st.none(), st.integers(1, 6)))
def test_every_choice_fits_the_free_gpus_and_uses_exactly_the_request(states, world, nodes):
    cluster = [node(f"n{i}", g, min(u, g), s) for i, (g, u, s) in enumerate(states)]
    req = request(world_size=world, nodes=nodes)
    free = {n.name: al.free_gpus(n, req)[0] for n in cluster}
    try:
        choice = al.choose(cluster, req)
    except al.NoFit:
        # Refused only when no set of that many nodes holds the GPUs.
        best = sorted(free.values(), reverse=True)
        k_options = [nodes] if nodes else range(1, len(best) + 1)
        assert all(sum(best[:k]) < world or k > world or k > len([f for f in best if f > 0])
                   for k in k_options)
        return
    assert choice.world_size == world
    assert len(set(choice.nodes)) == len(choice.nodes)
    assert all(0 < c <= free[n] for n, c in zip(choice.nodes, choice.counts))
    if nodes:
        assert len(choice.nodes) == nodes
    else:  # fewest nodes: no smaller set of nodes has enough free GPUs
        best = sorted(free.values(), reverse=True)
        assert sum(best[:len(choice.nodes) - 1]) < world


def test_render_pins_the_chosen_layout_and_records_how(monkeypatch, tmp_path):
    """`slurmgen render --gpus auto --world-size 5` with node2 drained: the script asks for the
    chosen nodes and says in its header how they were chosen; the choice goes to stderr."""
    from click.testing import CliRunner

    from slurmgen.cli import cli

    nodes = [node("node1", 1), node("node2", 1, state="IDLE+DRAIN"), node("node3", 2), node("node4", 2)]
    monkeypatch.setattr(al, "query_nodes", lambda: nodes)
    monkeypatch.setattr(al, "default_partition", lambda: "debug")
    out = tmp_path / "job.sh"
    result = CliRunner().invoke(cli, ["render", "--gpus", "auto", "--world-size", "5", "--log-dir",
                                      str(tmp_path / "logs"), "-o", str(out)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "--gpus auto: 1,2,2 on node[1,3-4] (world size 5, from the GPUs free now)\n  node2: idle+drain" in result.stderr
    text = out.read_text()
    assert "# Layout: 3 node(s), GPUs per node 1,2(x2); world size 5" in text
    assert "# Chosen from the GPUs free at render time: --gpus 1,2,2 --nodelist node1,node3,node4" in text
    assert "#SBATCH --nodelist=node1" in text and "#SBATCH --nodelist=node[3-4]" in text


@pytest.mark.parametrize("args, message", [
    (["--gpus", "auto"], "--gpus auto: give --world-size W (exactly W GPUs) or --max-gpus M (as many as are free,"
                         " up to M), not both"),
    (["--gpus", "auto", "--world-size", "2", "--max-gpus", "4"], "--gpus auto: give --world-size W (exactly W GPUs)"
                                                                " or --max-gpus M (as many as are free, up to M), not both"),
    (["--gpus", "2", "--world-size", "4"], "--world-size 4: only with --gpus auto (--gpus '2' fixes the layout)"),
    (["--gpus", "auto", "--world-size", "0"], "--world-size 0: must be a positive integer"),
    (["--gpus", "auto", "--world-size", "2", "--min-gpus", "1"], "--min-gpus 1: goes with --max-gpus"),
    (["--gpus", "auto", "--world-size", "2", "--nodelist", "node1"],
     "--nodelist: --gpus auto chooses the nodes itself; use --exclude to keep it off some"),
])
def test_auto_bad_input_is_one_line(args, message, tmp_path):
    from click.testing import CliRunner

    from slurmgen.cli import cli

    result = CliRunner().invoke(cli, ["render", "-o", str(tmp_path / "x.sh"), *args])
    assert result.exit_code == 2
    assert result.stderr == f"slurmgen: error: {message}\n"
    assert not (tmp_path / "x.sh").exists()


def test_alternatives_are_the_layouts_once_the_gpus_in_use_are_free():
    """The layout passed over for the one that starts now: fewer nodes, or more GPUs with
    --max-gpus; none when the idle choice is the same, and drained nodes stay out."""
    busy = [node("node1", 1), node("node2", 1), node("node3", 2, used=1, state="MIXED"), node("node4", 2)]
    chosen = al.choose(busy, request(world_size=5))
    (label, other), = al.alternatives(busy, request(world_size=5), chosen)
    assert (other.counts, other.nodes, label) == ((1, 2, 2), ("node1", "node3", "node4"),
                                                 "3 nodes, once the resources in use are free")
    chosen = al.choose(busy, request(max_gpus=8))
    (label, other), = al.alternatives(busy, request(max_gpus=8), chosen)
    assert (other.counts, label) == ((1, 1, 2, 2), "6 GPUs, once the resources in use are free")
    assert al.alternatives(ONE_ONE_TWO_TWO, request(world_size=6), al.choose(ONE_ONE_TWO_TWO, request(world_size=6))) == []
    drained = [node("node1", 1), node("node2", 1, state="IDLE+DRAIN"), node("node3", 2), node("node4", 2)]
    assert al.alternatives(drained, request(world_size=5), al.choose(drained, request(world_size=5))) == []


def test_check_adds_slurms_estimate_for_the_layout_and_the_alternatives(monkeypatch, tmp_path):
    """`slurmgen check --gpus auto`: the verdict, then sbatch --test-only's estimate for the
    chosen layout and for the one passed over; each estimate is asked with that layout's script."""
    from datetime import datetime, timedelta

    from click.testing import CliRunner

    from slurmgen.site import cluster
    from slurmgen.site import estimate
    from slurmgen.cli import cli

    busy = [node("node1", 1), node("node2", 1), node("node3", 2, used=1, state="MIXED"), node("node4", 2)]
    monkeypatch.setattr(al, "query_nodes", lambda: busy)
    monkeypatch.setattr(al, "default_partition", lambda: "debug")
    sinfo = "".join(f"node{i}|debug*|gpu:{g}|mixed|16|none|32000\n" for i, g in ((1, 1), (2, 1), (3, 2), (4, 2)))
    default, nodes = cluster.parse_sinfo(sinfo)
    monkeypatch.setattr(cluster, "query", lambda: cluster.ClusterInfo("slurm 22.05.8", default, tuple(nodes)))
    asked = []

    def ask(script):
        asked.append(script)
        later = len(asked) > 1
        return estimate.Estimate(datetime.now() + timedelta(minutes=90 if later else 0),
                                 "node[1,3-4]" if later else "node[1-4]")

    monkeypatch.setattr(estimate, "ask", ask)
    result = CliRunner().invoke(cli, ["check", "--gpus", "auto", "--world-size", "5", "--cpus-per-gpu", "2",
                                      "--log-dir", str(tmp_path), "--", "--model_name_or_path", "m"],
                                catch_exceptions=False)  # without a model, check fails
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[-2] == "start (sbatch --test-only): starts now on node[1-4]"
    assert re.fullmatch(r"alternative --gpus 1,2,2 --nodelist node1,node3,node4 \(3 nodes, once the resources in use"
                        r" are free\): starts at \S+ \S+ \(in (1 h 29|1 h 30) min\) on node\[1,3-4\]", lines[-1])
    assert "#SBATCH --nodelist=node[1-3]" in asked[0] and "#SBATCH --nodelist=node[3-4]" in asked[1]


def test_gpus_auto_from_a_profile(monkeypatch, tmp_path):
    """gpus = "auto" and world-size in a profile: the same choice as on the command line."""
    from click.testing import CliRunner

    from slurmgen.cli import cli

    monkeypatch.setattr(al, "query_nodes", lambda: ONE_ONE_TWO_TWO)
    monkeypatch.setattr(al, "default_partition", lambda: "debug")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "slurmgen.toml").write_text('[default]\ngpus = "auto"\nworld-size = 4\ncpus-per-gpu = 2\n')
    result = CliRunner().invoke(cli, ["render", "-o", "job.sh"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert result.stderr.startswith("--gpus auto: 2,2 on node[3-4] (world size 4, from the GPUs free now)")
    assert "# Chosen from the GPUs free at render time: --gpus 2,2 --nodelist node3,node4" in \
        (tmp_path / "job.sh").read_text()
