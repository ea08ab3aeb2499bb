"""FSDP through the Trainer's own arguments (`--fsdp --fsdp_config`), on CPUs over gloo, under
torchrun on one machine (issue 25, item 2): each rank holds its share of the parameters, the
losses are DDP's, and the final checkpoint is a normal Hugging Face model."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from train_fixtures import (assert_ok, assert_same_params, classify_args, hf_cache, progress_lines,  # noqa: F401
                            read_metrics, run_torchrun, sft_args, subprocess_env, tiny)

FSDP = ["--fsdp", "--fsdp_config", '{"cpu_ram_efficient_loading": true}']


@pytest.mark.timeout(300)
def test_sft_fsdp_shards_the_parameters_and_matches_ddp(tiny, tmp_path, hf_cache):
    env = subprocess_env(hf_cache, SLURMGEN_TEST_PARAM_DIGEST_DIR=str(tmp_path / "digests"))
    runs = {}
    for mode, extra in (("ddp", []), ("fsdp", FSDP)):
        out = tmp_path / mode
        assert_ok(run_torchrun("train.sft", sft_args(tiny, out, 6, 6, "--seed", "1", *extra), 2, env))
        runs[mode] = out
    ddp, fsdp = read_metrics(runs["ddp"]), read_metrics(runs["fsdp"])
    assert ddp["sharding"] == "replicated" and fsdp["sharding"] == "fsdp"
    whole = ddp["param_bytes_per_rank"][0]
    assert ddp["param_bytes_per_rank"] == [whole, whole]
    assert [share / (whole / 2) for share in fsdp["param_bytes_per_rank"]] == pytest.approx([1, 1], rel=0.05)
    losses = {mode: [line["loss"] for line in progress_lines(out)] for mode, out in runs.items()}
    assert len(losses["fsdp"]) == 6 and losses["fsdp"] == pytest.approx(losses["ddp"], rel=1e-4)
    assert fsdp["last_loss"] < fsdp["first_loss"]
    assert_same_params(tmp_path / "digests", 2)  # the gathered FSDP model is the same on both ranks
    from transformers import AutoModelForCausalLM

    saved = AutoModelForCausalLM.from_pretrained(runs["fsdp"] / "checkpoint-6")
    assert sum(p.numel() * p.element_size() for p in saved.parameters()) == whole


@pytest.mark.timeout(300)
def test_classify_fsdp_shards_the_parameters(tiny, tmp_path, hf_cache):
    out = tmp_path / "run"
    assert_ok(run_torchrun("train.classify", classify_args(tiny, out, 6, 6, *FSDP, batch=8), 2,
                           subprocess_env(hf_cache)))
    metrics = read_metrics(out)
    assert metrics["sharding"] == "fsdp" and metrics["global_step"] == 6
    assert max(metrics["param_bytes_per_rank"]) < 0.6 * sum(metrics["param_bytes_per_rank"])
