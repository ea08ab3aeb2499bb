"""train.sft end to end on the tiny assets: one process, torchrun, uneven nodes, Slurm tasks."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # train_fixtures, whatever the import mode
from train_fixtures import (assert_ok, assert_same_params, assert_single_writer, clean_env, hf_cache,  # noqa: F401
                            progress_lines, read_metrics, run_slurm_tasks, run_torchrun, run_uneven,
                            sft_args, subprocess_env, tiny)

HOST = socket.gethostname()


def check_run(out, metrics, world, steps=10, checkpoints=(5, 10)):
    m = read_metrics(out)
    if metrics is not None:  # in process: main() returns what it wrote
        assert metrics == m
    assert m["world_size"] == world
    assert m["global_step"] == steps
    assert m["last_loss"] < m["first_loss"], m
    assert m["resumed_from_step"] is None and m["stopped_early"] is False
    assert m["ranks_per_host"] == {HOST: world}
    assert len(m["peak_rss_mb_per_rank"]) == world and min(m["peak_rss_mb_per_rank"]) > 50
    assert m["data_prep_seconds"] > 0
    assert m["samples_per_second"] > 0 and m["tokens_per_second"] > 0
    assert m["train_loss"] > 0
    assert_single_writer(out, steps_logged=steps, checkpoints=list(checkpoints))
    lines = progress_lines(out)
    assert [ln["step"] for ln in lines] == list(range(1, steps + 1))
    assert all(ln["max_steps"] == steps for ln in lines)
    return m


@pytest.mark.timeout(120)
def test_sft_single_process_contract_command(tiny, tmp_path, clean_env):
    """The command from the contract, in process, exactly (no learning rate given)."""
    from train import sft

    out = tmp_path / "run"
    metrics = sft.main(["--model_name_or_path", str(tiny / "lm"),
                        "--dataset_name", str(tiny / "data" / "text.jsonl"), "--output_dir", str(out),
                        "--max_steps", "10", "--save_steps", "5", "--per_device_train_batch_size", "4",
                        "--logging_steps", "1", "--report_to", "none"])
    assert metrics["global_step"] == 10 and metrics["world_size"] == 1
    assert (out / "checkpoint-10" / "model.safetensors").exists()


@pytest.mark.timeout(120)
def test_sft_single_process_learns(tiny, tmp_path, clean_env):
    from train import sft

    out = tmp_path / "run"
    metrics = sft.main(sft_args(tiny, out))
    check_run(out, metrics, world=1)


@pytest.mark.timeout(120)
def test_sft_chat_data_with_lora_and_recipe(tiny, tmp_path, clean_env):
    """messages column, LoRA (peft) on CPU, and options from a --config recipe."""
    from train import sft

    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("use_peft: true\nlora_r: 8\nlora_target_modules: [q_proj, v_proj]\nmax_length: 128\n")
    out = tmp_path / "run"
    metrics = sft.main(sft_args(tiny, out, 6, 6, "--config", str(recipe), data="chat.jsonl")
                       + ["--learning_rate", "1e-2"])
    assert metrics["global_step"] == 6 and metrics["last_loss"] < metrics["first_loss"]
    assert (out / "checkpoint-6" / "adapter_model.safetensors").exists()


@pytest.mark.timeout(120)
def test_sft_packing(tiny, tmp_path, clean_env):
    from train import sft

    out = tmp_path / "run"
    metrics = sft.main(sft_args(tiny, out, 6, 6, "--packing", "--max_length", "256", batch=2))
    assert metrics["global_step"] == 6 and metrics["last_loss"] < metrics["first_loss"]


@pytest.mark.timeout(240)
def test_sft_torchrun_two_processes(tiny, tmp_path, hf_cache):
    out, digests = tmp_path / "run", tmp_path / "digests"
    env = subprocess_env(hf_cache, SLURMGEN_TEST_PARAM_DIGEST_DIR=str(digests))
    result = run_torchrun("train.sft", sft_args(tiny, out), 2, env)
    assert_ok(result)
    assert result.stdout.count("slurmgen-train: fresh start") == 1  # rank 0 only
    check_run(out, None, world=2)
    assert_same_params(digests, 2)


@pytest.mark.timeout(300)
def test_sft_uneven_nodes(tiny, tmp_path, hf_cache):
    """Two torchrun agents on one machine with 1 and 2 workers: ranks 0 | 1,2."""
    out, digests = tmp_path / "run", tmp_path / "digests"
    env = subprocess_env(hf_cache, SLURMGEN_TEST_PARAM_DIGEST_DIR=str(digests))
    assert_ok(run_uneven("train.sft", sft_args(tiny, out), [1, 2], env))
    assert check_run(out, None, world=3)["local_world_sizes"] == [1, 2, 2]
    assert_same_params(digests, 3)


@pytest.mark.timeout(300)
def test_sft_het_slurm_tasks(tiny, tmp_path, hf_cache):
    """The production launch: one srun per het component, one task per GPU, no torchrun.
    Component 0 has one node with 1 task, component 1 one node with 2 tasks; ranks come
    from SLURMGEN_RANK_OFFSET + SLURM_PROCID, master and port from the Slurm variables."""
    out, digests = tmp_path / "run", tmp_path / "digests"
    env = subprocess_env(hf_cache, SLURMGEN_TEST_PARAM_DIGEST_DIR=str(digests))
    assert_ok(run_slurm_tasks("train.sft", sft_args(tiny, out), [[1], [2]], env))
    assert check_run(out, None, world=3)["local_world_sizes"] == [1, 2, 2]
    assert_same_params(digests, 3)
