"""train.ddp_loop (plain PyTorch DDP) on the tiny assets."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # train_fixtures, whatever the import mode
from train_fixtures import (assert_ok, assert_same_params, assert_single_writer, clean_env, ddp_args,  # noqa: F401
                            hf_cache, progress_lines, read_metrics, run_slurm_tasks, run_uneven,
                            subprocess_env, tiny)

HOST = socket.gethostname()


def check_run(out, world, steps=10):
    m = read_metrics(out)
    assert m["world_size"] == world and m["global_step"] == steps
    assert m["last_loss"] < m["first_loss"], m
    assert m["ranks_per_host"] == {HOST: world}
    assert len(m["peak_rss_mb_per_rank"]) == world and min(m["peak_rss_mb_per_rank"]) > 50
    assert m["data_prep_seconds"] > 0
    assert m["stopped_early"] is False and m["resumed_from_step"] is None
    assert m["samples_per_second"] > 0 and m["tokens_per_second"] > 0
    assert_single_writer(out, steps_logged=steps, checkpoints=[5, 10])
    files = sorted(p.name for p in (out / "checkpoint-10").iterdir())
    assert "model.safetensors" in files and "trainer.pt" in files
    return m


@pytest.mark.timeout(120)
def test_ddp_loop_single_process(tiny, tmp_path, clean_env):
    from train import ddp_loop

    out = tmp_path / "run"
    metrics = ddp_loop.main(ddp_args(tiny, out))
    assert metrics == read_metrics(out)
    check_run(out, world=1)
    assert [ln["step"] for ln in progress_lines(out)] == list(range(1, 11))


@pytest.mark.timeout(300)
def test_ddp_loop_uneven_nodes(tiny, tmp_path, hf_cache):
    out, digests = tmp_path / "run", tmp_path / "digests"
    env = subprocess_env(hf_cache, SLURMGEN_TEST_PARAM_DIGEST_DIR=str(digests))
    assert_ok(run_uneven("train.ddp_loop", ddp_args(tiny, out, batch=4), [1, 2], env))
    check_run(out, world=3)
    assert_same_params(digests, 3)


@pytest.mark.timeout(300)
def test_ddp_loop_slurm_tasks_uneven(tiny, tmp_path, hf_cache):
    """One srun step, one task per GPU, tasks per node 1,2 (SLURM_STEP_TASKS_PER_NODE=1,2)."""
    out, digests = tmp_path / "run", tmp_path / "digests"
    env = subprocess_env(hf_cache, SLURMGEN_TEST_PARAM_DIGEST_DIR=str(digests))
    assert_ok(run_slurm_tasks("train.ddp_loop", ddp_args(tiny, out, batch=4), [[1, 2]], env))
    assert check_run(out, world=3)["local_world_sizes"] == [1, 2, 2]
    assert_same_params(digests, 3)


@pytest.mark.timeout(300)
def test_ddp_loop_fsdp_shards_matches_ddp_and_resumes_exactly(tiny, tmp_path, hf_cache):
    """--fsdp (fully_shard): DDP for 6 steps; FSDP for 3, stopped, and again to 6 from its gathered
    checkpoint: each rank holds half the parameters, every loss is DDP's, the checkpoint loads."""
    from train_fixtures import run_torchrun

    ddp_out, fsdp_out, digests = tmp_path / "ddp", tmp_path / "fsdp", tmp_path / "digests"
    assert_ok(run_torchrun("train.ddp_loop", ddp_args(tiny, ddp_out, 6, 3, batch=4), 2, subprocess_env(hf_cache)))
    env = subprocess_env(hf_cache, SLURMGEN_TEST_PARAM_DIGEST_DIR=str(digests))
    for steps in (3, 6):
        assert_ok(run_torchrun("train.ddp_loop", ddp_args(tiny, fsdp_out, steps, 3, "--fsdp", batch=4), 2, env))
    ddp, fsdp = read_metrics(ddp_out), read_metrics(fsdp_out)
    assert ddp["sharding"] == "replicated" and fsdp["sharding"] == "fsdp"
    assert fsdp["resumed_from_step"] == 3 and fsdp["global_step"] == 6
    whole = ddp["param_bytes_per_rank"][0]
    assert [share / (whole / 2) for share in fsdp["param_bytes_per_rank"]] == pytest.approx([1, 1], rel=0.05)
    assert [ln["step"] for ln in progress_lines(fsdp_out)] == [1, 2, 3, 4, 5, 6]
    losses = [[ln["loss"] for ln in progress_lines(out)] for out in (ddp_out, fsdp_out)]
    assert losses[1] == pytest.approx(losses[0], rel=1e-4)
    assert_same_params(digests, 2)
    from transformers import AutoModelForCausalLM

    saved = AutoModelForCausalLM.from_pretrained(fsdp_out / "checkpoint-6")
    assert sum(p.numel() * p.element_size() for p in saved.parameters()) == whole
