"""Issue 43 item 9: --partition and --constraint per node. On an uneven cluster the 1-GPU and the 2-GPU
nodes are often in different partitions or carry different features: each het component asks for its
own, a list that no node of the cluster can satisfy is refused before anything is written (sinfo),
and the submit path, which has no components, refuses a list that differs between nodes."""
import os

import pytest

from slurmgen.plan.layout import materialize
from slurmgen.plan.spec import JobSpec
from slurmgen.plan.words import SpecError
from slurmgen.site import features
from slurmgen.site.check import assess
from slurmgen.site.cluster import ClusterInfo, parse_sinfo
from slurmgen.site.fit_budget import from_cluster
from tests.test_vetting import BROKEN_SBATCH, fake_bin, refused

pytestmark = pytest.mark.unit

MODULE = ["--module", "x.y"]
PARTS = ["--nodes", "4", "--gpus", "1,1,2,2", "--partition", "small,small,big,big",
         "--constraint", "v100,v100,a100,a100"]


def components(script: str) -> list[list[str]]:
    """Each het component's #SBATCH lines after the layout's (--nodes on), in order."""
    found: list[list[str]] = [[]]
    for line in script.splitlines():
        if line == "#SBATCH hetjob":
            found.append([])
        elif line.startswith("#SBATCH ") and (found[-1] or line.startswith("#SBATCH --nodes=")):
            found[-1].append(line)
    return found


def render(render_args, *args):
    result = render_args("render", "-o", "-", *MODULE, *args)
    assert result.exit_code == 0, result.output
    return result.stdout


def test_each_component_asks_for_its_own_partition_and_features(render_args, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    script = render(render_args, *PARTS)
    assert components(script) == [
        ["#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=1", "#SBATCH --cpus-per-task=4", "#SBATCH --gres=gpu:1",
         "#SBATCH --partition=small", "#SBATCH --constraint=v100"],
        ["#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=1", "#SBATCH --cpus-per-task=8", "#SBATCH --gres=gpu:2",
         "#SBATCH --partition=big", "#SBATCH --constraint=a100"],
    ]
    assert "#   component 1 (2 node(s) x 2 GPUs, partition big, constraint a100): node ranks 2-3," in script


def test_partitions_split_a_gpu_group_into_two_components(render_args, tmp_path, monkeypatch):
    """Two 1-GPU nodes in different partitions cannot share a component: three components, node
    ranks in --gpus order within each."""
    monkeypatch.chdir(tmp_path)
    result = render_args("render", "-o", "-", *MODULE, "--nodes", "4", "--gpus", "1,1,2,2",
                         "--partition", "small,big,big,big")
    assert result.exit_code == 0, result.output
    assert [[line for line in c if "partition" in line or "nodes=" in line or "gres" in line]
            for c in components(result.stdout)] == [
        ["#SBATCH --nodes=1", "#SBATCH --gres=gpu:1", "#SBATCH --partition=small"],
        ["#SBATCH --nodes=1", "#SBATCH --gres=gpu:1", "#SBATCH --partition=big"],
        ["#SBATCH --nodes=2", "#SBATCH --gres=gpu:2", "#SBATCH --partition=big"],
    ]
    assert "  component 1: 1 node(s) x 1 GPU(s), partition big, node ranks 1-1, global ranks 1-1" in result.stderr


@pytest.mark.parametrize("value", ["a100&ib", "[rack1|rack2]", "a100|h100"])
def test_one_constraint_keeps_slurms_syntax_on_every_component(value, render_args, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    script = render(render_args, "--nodes", "4", "--gpus", "1,1,2,2", "--partition", "gpu", "--constraint", value)
    assert [[line for line in c if "partition" in line or "constraint" in line] for c in components(script)] == [
        ["#SBATCH --partition=gpu", f'#SBATCH --constraint="{value}"']] * 2


def test_a_list_of_another_length_is_slurms_own_constraint(render_args, tmp_path, monkeypatch):
    """A comma is Slurm's AND: only a list of one entry per node is per node."""
    monkeypatch.chdir(tmp_path)
    script = render(render_args, "--nodes", "4", "--gpus", "2", "--constraint", "a100,ib")
    assert components(script)[0][-1] == "#SBATCH --constraint=a100,ib"


def test_the_same_value_for_every_node_is_one_component(render_args, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    script = render(render_args, "--nodes", "2", "--gpus", "2", "--partition", "big,big", "--constraint", "a100,a100")
    assert components(script) == [["#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=1", "#SBATCH --cpus-per-task=8",
                                   "#SBATCH --gres=gpu:2", "#SBATCH --partition=big", "#SBATCH --constraint=a100"]]


@pytest.mark.parametrize("args,message", [
    (["--partition", "small,big,big"], "--partition 'small,big,big': give one partition for all nodes, or one per"
                                       " node (4)"),
    (["--partition", "small,,big,big"], "--partition 'small,,big,big': give one partition for all nodes, or one"
                                        " per node (4)"),
    (["--constraint", "v100,,a100,a100"], "--constraint 'v100,,a100,a100': an empty entry; give one constraint for"
                                          " all nodes, or one per node (4), several features of one node joined by &"),
    (["--partition", "small,small,big,big", "--spares", "1"], "--spares 1: a spare stands in for any node, so the"
                                                              " nodes must share one --partition"),
])
def test_lists_that_fit_no_node_are_refused(args, message, render_args, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = render_args("render", *MODULE, "--nodes", "4", "--gpus", "1,1,2,2", *args)
    refused(result, message, tmp_path)


def test_submit_refuses_a_list_that_differs_between_nodes(render_args, tmp_path, monkeypatch):
    bin_dir = fake_bin(tmp_path, "sbatch", BROKEN_SBATCH)  # were it not refused, nothing is queued
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.chdir(tmp_path)
    for option, value in (("--partition", "small,small,big,big"), ("--constraint", "v100,v100,a100,a100")):
        result = render_args("submit", "--nodes", "4", "--gpus", "1,1,2,2", option, value, *MODULE)
        refused(result, f"{option} {value!r}: slurmgen submit submits one job, not one component per group of"
                        f" nodes; give one {option[2:]} for all nodes, or use slurmgen render (a het job)", tmp_path)


def test_submit_takes_one_value_given_per_node():
    from slurmgen.submit import parameters

    spec = JobSpec(gpus=(1, 2), partition="big,big", constraint="a100&ib").validate()
    parameters.check_submittable(spec)
    params = parameters.slurm_parameters(spec)
    assert (params["partition"], params["constraint"]) == ("big", "a100&ib")


def test_gpus_auto_refuses_a_partition_list(render_args, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = render_args("render", *MODULE, "--gpus", "auto", "--max-gpus", "4", "--partition", "small,big")
    refused(result, "--partition 'small,big' with --gpus auto: auto picks the nodes in one partition; give one, or"
                    " the layout (--gpus 1,1,2,2) with a partition per node", tmp_path)


# ------------------------------------------------------------------ what sinfo says the cluster has
SINFO = ("n1|small*|gpu:1|idle|8|none|1000|v100\\nn2|small*|gpu:1|idle|8|none|1000|v100\\n"
         "n3|big|gpu:2|idle|8|none|1000|a100,ib\\nn4|big|gpu:2|idle|8|none|1000|a100\\n")


@pytest.fixture
def sinfo_here(tmp_path, monkeypatch):
    """A stand-in sinfo first on PATH: small (n1, n2: 1 GPU, v100) and big (n3, n4: 2 GPUs, a100; n3 ib)."""
    bin_dir = fake_bin(tmp_path, "sinfo", f"printf '{SINFO}'")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.chdir(tmp_path)


@pytest.mark.machine_vetting
@pytest.mark.parametrize("args,message", [
    (["--partition", "small,small,huge,big"],
     "--partition 'small,small,huge,big': no partition 'huge' here; partitions: big, small (sinfo)"),
    (["--partition", "small,big,big,big"], "--partition 'small,big,big,big': 3 nodes in partition big, which has 2"
                                           " (sinfo)"),
    (["--partition", "small,small,big,big", "--constraint", "v100,v100,a100,h100"],
     "--constraint 'v100,v100,a100,h100': no node of partition big has 'h100'; features there: a100, ib (sinfo)"),
    (["--partition", "small,small,big,big", "--constraint", "v100,v100,a100&ib,a100&ib"],
     "--constraint 'v100,v100,a100&ib,a100&ib': 2 nodes need 'a100&ib' in partition big, which has 1; features"
     " there: a100, ib (sinfo)"),
    ([], "--nodes 4: 4 nodes in partition small (the default), which has 2 (sinfo)"),
])
def test_what_no_node_of_the_cluster_has_is_refused(args, message, render_args, tmp_path, sinfo_here):
    result = render_args("render", *MODULE, "--nodes", "4", "--gpus", "1,1,2,2", *args)
    refused(result, message, tmp_path)


@pytest.mark.machine_vetting
def test_what_the_cluster_has_is_rendered(render_args, tmp_path, sinfo_here):
    assert render_args("render", "-o", "job.sh", *MODULE, *PARTS).exit_code == 0
    assert render_args("render", "-o", "job2.sh", *MODULE, "--nodes", "4", "--gpus", "1,1,2,2", "--partition",
                       "small,small,big,big", "--constraint", "v100,v100,[a100|h100],a100").exit_code == 0
    # a count (ib*1: one node with ib) is no feature every node needs
    assert render_args("render", "-o", "job3.sh", *MODULE, "--nodes", "2", "--gpus", "2", "--partition", "big",
                       "--constraint", "a100&ib*1").exit_code == 0
    # a GPU count is judged against its node's own partition
    result = render_args("render", *MODULE, "--nodes", "2", "--gpus", "2,2", "--partition", "small,big")
    assert (result.exit_code, result.stderr) == (
        2, "slurmgen: error: --gpus '2,2': 2 GPUs on one node, but no node of partition small has more than 1"
           " (sinfo)\n")


# ------------------------------------------------------------------ check, fit, the expressions
CLUSTER = ("n1|small*|gpu:1|idle|8|none|1000|v100\nn2|small*|gpu:1|drained|8|broken|1000|v100\n"
           "n3|big|gpu:2|idle|8|none|4000|a100,ib\nn4|big|gpu:2|idle|8|none|4000|a100\n")


def verdict(**kwargs):
    plan = materialize(JobSpec(**kwargs).validate())
    return assess(plan, ClusterInfo("slurm 22.05.8", *parse_sinfo(CLUSTER)))


def test_check_judges_each_component_in_its_own_partition():
    ok = verdict(gpus=(1, 2, 2), partition="small,big,big", constraint="v100,a100,a100")
    assert ok.ok and ok.lines[0] == "cluster: slurm 22.05.8; partitions small, big"
    assert "component 0 (1 node(s) x 1 GPU(s)): can run on n1" in ok.lines
    assert "component 1 (2 node(s) x 2 GPU(s)): can run on n3, n4" in ok.lines
    short = verdict(gpus=(1, 1, 2, 2), partition="small,small,big,big", constraint="v100,v100,a100&ib,a100&ib")
    assert not short.ok
    assert ("component 0 (2 node(s) x 1 GPU(s)): cannot run: needs 2 node(s) with >= 1 GPU(s) in partition small"
            " with 'v100'; 1 usable (n1)") in short.lines
    assert ("component 1 (2 node(s) x 2 GPU(s)): cannot run: needs 2 node(s) with >= 2 GPU(s) in partition big"
            " with 'a100&ib'; 1 usable (n3)") in short.lines
    assert "  n2 is drained (broken)" in short.lines
    counted = verdict(gpus=(2, 2), partition="big", constraint="a100&ib*1")  # one node with ib is enough
    assert counted.ok and "component 0 (2 node(s) x 2 GPU(s)): can run on n3, n4" in counted.lines


def test_fit_reads_each_nodes_memory_in_its_own_partition():
    default, nodes = parse_sinfo(CLUSTER)
    budget = from_cluster((1, 1), nodes, "small,big", default)
    assert budget.gib == (1000 / 1024, 4000 / 1024)
    assert from_cluster((1,), nodes, None, default).gib == (1000 / 1024,)  # the default partition's


@pytest.mark.parametrize("expression,have,expected", [
    ("a100", {"a100"}, True), ("a100&ib", {"a100"}, False), ("a100|h100", {"h100"}, True),
    ("[rack1|rack2]", {"rack2"}, True), ("(a&b)|c", {"c"}, True), ("!a", {"b"}, True), ("a100*2", {"a100"}, True),
    ("a,b", {"a"}, False), ("a&", {"a"}, None), ("(a", {"a"}, None),
])
def test_constraint_expressions_against_a_nodes_features(expression, have, expected):
    assert features.satisfies(expression, have) is expected


def test_a_spec_says_each_nodes_partition_and_constraint():
    spec = JobSpec(gpus=(1, 1, 2), partition="gpu", constraint="v100,v100,a100&ib").validate()
    assert (spec.partitions, spec.constraints) == (("gpu",) * 3, ("v100", "v100", "a100&ib"))
    with pytest.raises(SpecError):
        JobSpec(gpus=(1, 2), partition="a,b,c").validate()
