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

FSDP = ["--fsdp"]  # what `slurmgen fit` recommends


@pytest.mark.timeout(400)
def test_sft_fsdp_shards_matches_ddp_and_resumes_exactly(tiny, tmp_path, hf_cache):
    """DDP for 6 steps; FSDP for 3, stopped, and again to 6 from its checkpoint (a constant
    learning rate, so that both FSDP runs follow one schedule): every step runs once and every
    loss is DDP's."""
    env = subprocess_env(hf_cache, SLURMGEN_TEST_PARAM_DIGEST_DIR=str(tmp_path / "digests"))
    constant = ["--seed", "1", "--lr_scheduler_type", "constant"]
    ddp_out, fsdp_out = tmp_path / "ddp", tmp_path / "fsdp"
    assert_ok(run_torchrun("train.sft", sft_args(tiny, ddp_out, 6, 3, *constant), 2, env))
    # The first run loads once: rank 1 builds the model empty and has its weights from rank 0 alone.
    for steps, once in ((3, ["--fsdp_config", '{"cpu_ram_efficient_loading": true}']), (6, [])):
        assert_ok(run_torchrun("train.sft", sft_args(tiny, fsdp_out, steps, 3, *constant, *FSDP, *once), 2, env))
    ddp, fsdp = read_metrics(ddp_out), read_metrics(fsdp_out)
    assert ddp["sharding"] == "replicated" and fsdp["sharding"] == "fsdp"
    assert fsdp["resumed_from_step"] == 3 and fsdp["global_step"] == 6
    whole = ddp["param_bytes_per_rank"][0]
    assert ddp["param_bytes_per_rank"] == [whole, whole]
    assert [share / (whole / 2) for share in fsdp["param_bytes_per_rank"]] == pytest.approx([1, 1], rel=0.05)
    fsdp_steps = [line["step"] for line in progress_lines(fsdp_out)]
    assert fsdp_steps == [1, 2, 3, 4, 5, 6]
    losses = {name: [line["loss"] for line in progress_lines(out)] for name, out in (("ddp", ddp_out),
                                                                                        ("fsdp", fsdp_out))}
    assert losses["fsdp"] == pytest.approx(losses["ddp"], rel=1e-4)
    assert_same_params(tmp_path / "digests", 2)  # the gathered FSDP model is the same on both ranks
    from transformers import AutoModelForCausalLM

    saved = AutoModelForCausalLM.from_pretrained(fsdp_out / "checkpoint-6")
    assert sum(p.numel() * p.element_size() for p in saved.parameters()) == whole


@pytest.mark.timeout(300)
def test_classify_fsdp_shards_the_parameters(tiny, tmp_path, hf_cache):
    out = tmp_path / "run"
    assert_ok(run_torchrun("train.classify", classify_args(tiny, out, 6, 6, *FSDP, batch=8), 2,
                           subprocess_env(hf_cache)))
    metrics = read_metrics(out)
    assert metrics["sharding"] == "fsdp" and metrics["global_step"] == 6
    assert max(metrics["param_bytes_per_rank"]) < 0.6 * sum(metrics["param_bytes_per_rank"])
