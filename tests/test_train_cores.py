"""train.cores: each torchrun worker's slice of its agent's CPUs (the run itself: test_train_faults)."""
from train import cores


def test_slices_follow_numa_nodes():
    # CPUs 0-3 on NUMA node 0 and 4-7 on node 1, numbered across sockets (0,4 node 0 ...) on some
    # machines: slices stay within a node where the counts allow.
    node_of = {0: 0, 1: 1, 2: 0, 3: 1, 4: 0, 5: 1, 6: 0, 7: 1}.get
    cpus = list(range(8))
    assert [cores.slice_for(cpus, r, 2, node_of) for r in range(2)] == [[0, 2, 4, 6], [1, 3, 5, 7]]
    assert [cores.slice_for(cpus, r, 4, node_of) for r in range(4)] == [[0, 2], [4, 6], [1, 3], [5, 7]]
    assert cores.ranges([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"
    assert cores.cpus_in("0-2,5,7-8") == {0, 1, 2, 5, 7, 8}


def test_no_binding_outside_torchrun():
    assert cores.bind({"LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}) is None  # --launcher srun: Slurm binds
    assert cores.bind({"TORCHELASTIC_RUN_ID": "x", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2",
                       "SLURMGEN_BIND_CORES": "0"}) is None
