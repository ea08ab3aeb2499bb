"""`slurmgen check` judgement on fixed sinfo output (pure); the real cluster is in tests/e2e."""
from slurmgen.site.check import assess
from slurmgen.site.cluster import ClusterInfo, gpu_count, parse_sinfo
from slurmgen.plan.layout import materialize
from slurmgen.plan.spec import JobSpec

SINFO = """node1|debug*|gpu:1|idle|16|none
node2|debug*|gpu:1|mixed|16|none
node3|debug*|gpu:a100:2(S:0-1)|idle|16|none
node4|debug*|gpu:2|drained|16|maintenance
node5|cpu|(null)|idle|64|none
"""


def cluster():
    default, nodes = parse_sinfo(SINFO)
    return ClusterInfo(version="slurm 22.05.8", default_partition=default, nodes=tuple(nodes))


def verdict(gpus, **kwargs):
    return assess(materialize(JobSpec(gpus=tuple(gpus), **kwargs).validate()), cluster())


def test_gres_forms():
    assert [gpu_count(g) for g in ("gpu:2", "gpu:a100:4(S:0-1)", "gpu:1,shard:8", "(null)")] == [2, 4, 1, 0]


def test_layout_that_fits_says_where():
    v = verdict((1, 1, 2))
    assert v.ok
    assert "component 1 (1 node(s) x 2 GPU(s)): can run on node3" in v.text()
    assert "component 0 (2 node(s) x 1 GPU(s)): can run on node1, node2" in v.text()


def test_drained_node_is_reported_and_not_counted():
    v = verdict((2, 2))
    assert not v.ok
    assert ("component 0 (2 node(s) x 2 GPU(s)): cannot run: needs 2 node(s) with >= 2 GPU(s)"
            " in partition debug; 1 usable (node3)") in v.text()
    assert "  node4 is drained (maintenance)" in v.text()
    assert "suggestion: --nodes 3 --gpus 2,1,1 fits the usable nodes here" in v.text()


def test_missing_partition():
    v = verdict((1,), partition="gpu")
    assert not v.ok
    assert "cannot run: partition 'gpu' does not exist; partitions here: cpu, debug" in v.text()


def test_exclude_and_pinned_nodes_are_respected():
    excluded = verdict((1, 1), exclude="node1")
    assert excluded.ok and "can run on node2, node3" in excluded.text()
    v = verdict((1, 1), nodelist=("node1", "node3"))
    assert v.ok and "can run on node1, node3" in v.text()


def test_cpus_and_memory_count_as_well_as_gpus():
    """A node with the GPUs but too few CPUs or too little memory for its component is named."""
    default, nodes = parse_sinfo("node1|debug*|gpu:2|idle|16|none|64000\n"
                                 "node2|debug*|gpu:2|idle|4|none|64000\n"
                                 "node3|debug*|gpu:2|idle|16|none|8000\n")
    small = ClusterInfo(version="slurm 22.05.8", default_partition=default, nodes=tuple(nodes))
    fits = assess(materialize(JobSpec(gpus=(2,), cpus_per_gpu=4, mem="16G").validate()), small)
    assert fits.ok and "can run on node1" in fits.text()
    v = assess(materialize(JobSpec(gpus=(2, 2), cpus_per_gpu=4, mem="16G").validate()), small)
    assert not v.ok
    assert "1 usable (node1)" in v.text()
    assert "  node2 has the GPUs but 4 CPUs (needs 8)" in v.text()
    assert "  node3 has the GPUs but 8000 MB of memory (needs 16384)" in v.text()


def test_the_slurm_version_is_named_and_an_untested_one_warned_about():
    default, nodes = parse_sinfo(SINFO)
    plan = materialize(JobSpec(gpus=(1,)).validate())
    for version, warned in (("slurm 22.05.8", False), ("slurm 25.11.7", False), ("slurm 23.02.1", True)):
        text = assess(plan, ClusterInfo(version=version, default_partition=default, nodes=tuple(nodes))).text()
        assert text.startswith(f"cluster: {version}; ")
        warning = ("warning: slurmgen is tested on Slurm 22.05, 24.11, 25.11;"
                   f" this cluster runs {version}")
        assert (warning in text) is warned


def test_mem_per_gpu_and_cpus_per_node_count_per_component():
    v = verdict((1, 2), mem_per_gpu="20000M", cpus_per_node=16)
    assert v.ok, v.text()
    v = verdict((1, 2), cpus_per_node=17)
    assert not v.ok and "16 CPUs (needs 17)" in v.text()
