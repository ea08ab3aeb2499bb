"""A user's own Lightning script (tests/e2e/lightning_samples.py: it imports nothing of slurmgen's
but train.lightning's strategy, and only with --uneven) on the local cluster: on 1,1,2,2 with
UnevenDDPStrategy under both launchers, and on a uniform 2x2 with Lightning's own "ddp". In each
epoch the six (or four) ranks together train on each of the 48 samples exactly once, Lightning's
world is the job's, each rank on its node, and the loss goes down."""
from __future__ import annotations

import json

import pytest

from tests.conftest import need
from tests.e2e.conftest import REPO

need("lightning")  # the test extra has it; skipped without it, except under CI=true

SCRIPT = str(REPO / "tests" / "e2e" / "lightning_samples.py")
SAMPLES, EPOCHS = 48, 3


def assert_each_sample_once_per_epoch(seen: dict, world: int) -> None:
    assert len(seen["epochs"]) == EPOCHS, seen
    for epoch in seen["epochs"]:
        assert sorted(epoch["seen"]) == list(range(SAMPLES)), epoch["seen"]  # none twice, none left out
    assert seen["world_size"] == seen["processes"] == world, seen
    losses = [e["loss"] for e in seen["epochs"]]
    assert losses[-1] < losses[0] / 2, losses


@pytest.mark.timeout(300)
@pytest.mark.parametrize("launcher", ["torchrun", "srun"])
def test_a_lightning_script_trains_each_sample_once_on_uneven_nodes(submit_job, tmp_path, launcher):
    out = tmp_path / "seen.json"
    job = submit_job(["--nodes", "4", "--gpus", "1,1,2,2", "--launcher", launcher, "--script", SCRIPT],
                     [str(out), "--uneven", "--epochs", str(EPOCHS)])
    assert job.state == "COMPLETED", job.log[-4000:]
    assert "slurmgen rank hooks" not in job.log, job.log[-4000:]  # hooking Lightning's Trainer failed once
    seen = json.loads(out.read_text())
    assert_each_sample_once_per_epoch(seen, 6)
    assert [r["rank"] for r in seen["ranks"]] == [0, 1, 2, 3, 4, 5], seen["ranks"]
    assert [r["node_rank"] for r in seen["ranks"]] == [0, 1, 2, 2, 3, 3], seen["ranks"]
    assert [r["local_rank"] for r in seen["ranks"]] == [0, 0, 0, 1, 0, 1], seen["ranks"]


@pytest.mark.timeout(300)
def test_lightnings_own_ddp_on_a_uniform_layout_is_left_as_it_is(submit_job, tmp_path):
    """No strategy of ours: Lightning's "ddp" with devices=2, num_nodes=2, as on any uniform cluster."""
    out = tmp_path / "seen.json"
    job = submit_job(["--nodes", "2", "--gpus", "2", "--script", SCRIPT],
                     [str(out), "--devices", "2", "--nodes", "2", "--epochs", str(EPOCHS)])
    assert job.state == "COMPLETED", job.log[-4000:]
    seen = json.loads(out.read_text())
    assert_each_sample_once_per_epoch(seen, 4)
    assert [r["node_rank"] for r in seen["ranks"]] == [0, 0, 1, 1], seen["ranks"]
