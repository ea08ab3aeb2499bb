"""train.classify (transformers.Trainer, BERT-style) on the tiny assets."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # train_fixtures, whatever the import mode
from train_fixtures import (assert_ok, assert_same_params, assert_single_writer, classify_args,  # noqa: F401
                            clean_env, hf_cache, read_metrics, run_torchrun, subprocess_env, tiny)

HOST = socket.gethostname()


def check_run(out, world):
    m = read_metrics(out)
    assert m["world_size"] == world and m["global_step"] == 60
    assert m["last_loss"] < m["first_loss"], m
    # The signal in the synthetic reviews is easy: well above chance after 60 steps.
    assert m["eval_accuracy"] >= 0.8, m
    # Loss per example: about ln 2 at the start whatever the world size (not world x that).
    assert 0.5 < m["first_loss"] < 0.9, m
    assert m["ranks_per_host"] == {HOST: world}
    assert len(m["peak_rss_mb_per_rank"]) == world and min(m["peak_rss_mb_per_rank"]) > 50
    assert m["data_prep_seconds"] > 0
    assert m["stopped_early"] is False and m["resumed_from_step"] is None
    assert_single_writer(out, steps_logged=12, checkpoints=[30, 60])
    return m


@pytest.mark.timeout(120)
def test_classify_single_process(tiny, tmp_path, clean_env):
    from train import classify

    out = tmp_path / "run"
    metrics = classify.main(classify_args(tiny, out))
    assert metrics == read_metrics(out)
    check_run(out, world=1)


@pytest.mark.timeout(240)
def test_classify_torchrun_two_processes(tiny, tmp_path, hf_cache):
    """Same global batch (2 x 8) as the single-process run; the loss must not double."""
    out, digests = tmp_path / "run", tmp_path / "digests"
    env = subprocess_env(hf_cache, SLURMGEN_TEST_PARAM_DIGEST_DIR=str(digests))
    result = run_torchrun("train.classify", classify_args(tiny, out, batch=8), 2, env)
    assert_ok(result)
    check_run(out, world=2)
    assert_same_params(digests, 2)
