"""Table tests for train.distenv: torchrun, one Slurm task per GPU (uneven nodes), het jobs."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from train.distenv import DistEnv, DistEnvError, setup  # noqa: E402


def slurm_task(procid, nodeid, localid, *, ntasks=6, per_node="1(x2),2(x2)", nodes="node[1-4]",
               job_id=12345, **extra):
    env = {
        "SLURM_JOB_ID": str(job_id), "SLURM_STEP_ID": "0", "SLURM_PROCID": str(procid),
        "SLURM_NODEID": str(nodeid), "SLURM_LOCALID": str(localid), "SLURM_NTASKS": str(ntasks),
        "SLURM_STEP_NUM_TASKS": str(ntasks), "SLURM_STEP_TASKS_PER_NODE": per_node,
        "SLURM_STEP_NODELIST": nodes, "SLURM_JOB_NODELIST": nodes,
        "MASTER_PORT": "24345",  # what slurmgen's scripts export (derived from the job id)
    }
    env.update({k: str(v) for k, v in extra.items()})
    return env


def test_no_environment_is_rank_zero_of_one():
    d = DistEnv.from_environ({})
    assert (d.rank, d.local_rank, d.world_size, d.local_world_size) == (0, 0, 1, 1)
    assert (d.master_addr, d.master_port, d.launcher) == ("127.0.0.1", 29500, "single")
    assert not d.distributed and d.is_main


@pytest.mark.parametrize("env, expect", [
    ({"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2",
      "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29400"}, (0, 0, 2, 2, "127.0.0.1", 29400)),
    ({"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2",
      "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29400"}, (1, 1, 2, 2, "127.0.0.1", 29400)),
    # 1,1,2,2 under four static-rendezvous agents: the last node holds ranks 4 and 5.
    ({"RANK": "5", "LOCAL_RANK": "1", "WORLD_SIZE": "6", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "3",
      "MASTER_ADDR": "host1", "MASTER_PORT": "29500"}, (5, 1, 6, 2, "host1", 29500)),
    ({"RANK": "1", "LOCAL_RANK": "0", "WORLD_SIZE": "6", "LOCAL_WORLD_SIZE": "1", "GROUP_RANK": "1",
      "MASTER_ADDR": "host1", "MASTER_PORT": "29500"}, (1, 0, 6, 1, "host1", 29500)),
])
def test_torchrun_variables(env, expect):
    d = DistEnv.from_environ(env)
    assert (d.rank, d.local_rank, d.world_size, d.local_world_size, d.master_addr, d.master_port) == expect
    assert d.launcher == "torchrun"


# Six tasks on nodes with 1, 1, 2 and 2 GPUs: ranks 0 | 1 | 2,3 | 4,5.
UNEVEN = [
    # procid, nodeid, localid -> rank, local_rank, local_world_size
    ((0, 0, 0), (0, 0, 1)),
    ((1, 1, 0), (1, 0, 1)),
    ((2, 2, 0), (2, 0, 2)),
    ((3, 2, 1), (3, 1, 2)),
    ((4, 3, 0), (4, 0, 2)),
    ((5, 3, 1), (5, 1, 2)),
]


@pytest.mark.parametrize("task, expect", UNEVEN)
def test_slurm_uneven_one_task_per_gpu(task, expect):
    d = DistEnv.from_environ(slurm_task(*task))
    assert (d.rank, d.local_rank, d.local_world_size) == expect
    assert d.world_size == 6 and d.launcher == "slurm"
    assert d.node_rank == task[1]
    # No MASTER_ADDR set: the first host of the node list; the port is the exported one.
    assert d.master_addr == "node1"
    assert d.master_port == 24345


def test_slurm_tasks_need_the_exported_port():
    """The port is derived in one place (slurmgen.plan.spec, exported by the scripts and the submit
    path); a task without it says so instead of guessing a port of its own."""
    env = slurm_task(1, 1, 0)
    del env["MASTER_PORT"]
    with pytest.raises(DistEnvError, match="MASTER_PORT is not set: slurmgen's scripts export it"):
        DistEnv.from_environ(env)
    alone = slurm_task(0, 0, 0, ntasks=1, per_node="1", nodes="node1")
    del alone["MASTER_PORT"]
    assert DistEnv.from_environ(alone).master_port == 29500


def test_slurm_master_from_environment_wins():
    d = DistEnv.from_environ(slurm_task(3, 2, 1, MASTER_ADDR="10.0.0.7", MASTER_PORT=31000))
    assert (d.master_addr, d.master_port) == ("10.0.0.7", 31000)


def test_slurm_plain_tasks_per_node_list():
    d = DistEnv.from_environ(slurm_task(2, 1, 1, ntasks=3, per_node="1,2", nodes="a,b"))
    assert (d.rank, d.local_rank, d.world_size, d.local_world_size, d.master_addr) == (2, 1, 3, 2, "a")


# A het job as slurmgen groups it: component 0 = the two 1-GPU nodes, component 1 = the two
# 2-GPU nodes. Each component's srun numbers its tasks from 0; the script exports the offset.
HET = [
    # component, procid, nodeid, localid -> rank, local_world_size
    ((0, 0, 0, 0), (0, 1)),
    ((0, 1, 1, 0), (1, 1)),
    ((1, 0, 0, 0), (2, 2)),
    ((1, 1, 0, 1), (3, 2)),
    ((1, 2, 1, 0), (4, 2)),
    ((1, 3, 1, 1), (5, 2)),
]


@pytest.mark.parametrize("task, expect", HET)
def test_het_job_rank_offset(task, expect):
    comp, procid, nodeid, localid = task
    per_node, nodes, ntasks = (("1(x2)", "node[1-2]", 2) if comp == 0 else ("2(x2)", "node[3-4]", 4))
    env = slurm_task(procid, nodeid, localid, ntasks=ntasks, per_node=per_node, nodes=nodes,
                     job_id=700 + comp, SLURM_HET_JOB_ID=700,
                     SLURM_JOB_NODELIST_HET_GROUP_0="node[1-2]",
                     SLURMGEN_RANK_OFFSET=0 if comp == 0 else 2, SLURMGEN_WORLD_SIZE=6)
    d = DistEnv.from_environ(env)
    assert (d.rank, d.local_world_size, d.world_size) == (*expect, 6)
    assert d.local_rank == localid
    # Rank 0 lives on component 0's first node.
    assert d.master_addr == "node1"
    assert d.master_port == 24345


def test_batch_script_is_not_a_task():
    # The batch shell has SLURM_PROCID=0 and the job's task count, but no step variables:
    # a process started there directly is a single process, not rank 0 of 6.
    env = {"SLURM_JOB_ID": "9", "SLURM_PROCID": "0", "SLURM_NTASKS": "6", "SLURM_NODEID": "0",
           "SLURM_JOB_NODELIST": "node[1-4]", "SLURM_TASKS_PER_NODE": "1(x2),2(x2)"}
    d = DistEnv.from_environ(env)
    assert (d.world_size, d.launcher) == (1, "single")


def test_torchrun_inside_slurm_wins():
    env = slurm_task(0, 0, 0)
    env.update(RANK="3", LOCAL_RANK="1", WORLD_SIZE="4", LOCAL_WORLD_SIZE="2", MASTER_ADDR="m", MASTER_PORT="1")
    d = DistEnv.from_environ(env)
    assert (d.rank, d.world_size, d.launcher) == (3, 4, "torchrun")


@pytest.mark.parametrize("visible, local_rank, device", [
    (None, 1, 1),   # all devices visible: cuda:LOCAL_RANK
    ("0,1", 1, 1),
    ("1", 1, 0),    # --gpus-per-task=1: the one visible device is cuda:0
    ("GPU-8a1b", 1, 0),
])
def test_device_index(visible, local_rank, device):
    env = slurm_task(3, 2, local_rank)
    if visible is not None:
        env["CUDA_VISIBLE_DEVICES"] = visible
    assert DistEnv.from_environ(env).device_index == device


def test_export_sets_torch_variables():
    env = slurm_task(5, 3, 1)
    d = setup(env)
    assert {k: env[k] for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE",
                                "MASTER_ADDR", "MASTER_PORT")} == {
        "RANK": "5", "LOCAL_RANK": "1", "WORLD_SIZE": "6", "LOCAL_WORLD_SIZE": "2",
        "MASTER_ADDR": "node1", "MASTER_PORT": "24345"}
    # Reading back the exported variables gives the same placement; torch (and so Lightning) sees a
    # torch launch, not Slurm's per-component variables.
    again = DistEnv.from_environ(env)
    assert (again.rank, again.local_rank, again.world_size, again.local_world_size) == (5, 1, 6, 2)
    assert (env["GROUP_RANK"], env["TORCHELASTIC_RUN_ID"]) == ("3", "12345")
    assert d.rank == 5


def test_export_one_visible_gpu_uses_ordinal_zero():
    env = slurm_task(3, 2, 1, CUDA_VISIBLE_DEVICES="1")
    d = setup(env)
    assert d.local_rank == 1 and env["LOCAL_RANK"] == "0"


def test_single_process_exports_nothing():
    env = {}
    setup(env)
    assert env == {}


@pytest.mark.parametrize("env, message", [
    (slurm_task(6, 3, 1), "rank 6 is outside world size 6"),
    (slurm_task(4, 3, 2), "local rank 2 is outside local world size 2"),
    (slurm_task(0, 7, 0), "SLURM_NODEID=7 but tasks per node '1(x2),2(x2)' lists 4 nodes"),
    (slurm_task(0, 0, 0, SLURMGEN_RANK_OFFSET="x"), "SLURMGEN_RANK_OFFSET='x' is not an integer"),
    ({"RANK": "2", "WORLD_SIZE": "2"}, "rank 2 is outside world size 2"),
])
def test_inconsistent_environment_is_an_error(env, message):
    with pytest.raises(DistEnvError) as err:
        DistEnv.from_environ(env)
    assert str(err.value) == message


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=8), min_size=1, max_size=6))
def test_every_layout_numbers_ranks_once(per_node):
    """Enumerating every task of any layout yields ranks 0..N-1 once each, grouped by node."""
    total = sum(per_node)
    spec = ",".join(str(n) for n in per_node)
    seen = []
    procid = 0
    for node, count in enumerate(per_node):
        for local in range(count):
            d = DistEnv.from_environ(slurm_task(procid, node, local, ntasks=total, per_node=spec,
                                                nodes=f"n[0-{len(per_node) - 1}]"))
            assert d.local_world_size == count and d.world_size == total
            seen.append(d.rank)
            procid += 1
    assert seen == list(range(total))
