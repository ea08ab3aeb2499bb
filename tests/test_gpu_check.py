"""bench/gpu_check.sh (issue 25, item 5) without a GPU: the one-line refusal (exit status 2), and
the dry run end to end on CPU (a tiny model, fp32, the sft and FSDP cases through the real entry
points), whose table and output directories are checked. GPUs are hidden from every run, so the
test means the same on a machine that has one."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "bench" / "gpu_check.sh"
NO_CUDA = ("bench/gpu_check.sh: no CUDA GPU here (torch.cuda.is_available() is False); "
           "run it on a machine with one GPU")
DIST_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR",
             "MASTER_PORT", "TORCHELASTIC_RUN_ID", "GPU_CHECK_DRY_RUN")


def script_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in DIST_VARS and not k.startswith("SLURM_")}
    env.update(PYTHON=sys.executable, CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1", **extra)
    return env


def run_script(*args: str, timeout: float = 120, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(SCRIPT), *args], cwd=REPO, env=script_env(**extra), capture_output=True,
                          text=True, timeout=timeout)


def gpu_check_module():
    spec = importlib.util.spec_from_file_location("gpu_check", REPO / "bench" / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.timeout(60)
def test_without_cuda_one_line_and_status_2():
    run = run_script()
    assert run.returncode == 2, run.stdout + run.stderr
    assert run.stderr.strip() == NO_CUDA and run.stdout == ""


@pytest.mark.timeout(30)
def test_dry_run_from_the_environment_skips_the_cuda_check():
    # --steps 1 is refused by the option check that follows the CUDA check: no training started.
    run = run_script("--steps", "1", GPU_CHECK_DRY_RUN="1")
    assert run.returncode == 2 and "--steps (1) must be more than --warmup (1)" in run.stderr, run.stderr


def test_peak_table():
    peak = gpu_check_module().peak_tflops
    assert peak("NVIDIA H100 80GB HBM3") == 989 and peak("NVIDIA H200") == 989
    assert peak("NVIDIA H100 PCIe") == 756
    assert peak("NVIDIA A100-SXM4-80GB") == 312 and peak("NVIDIA A10") == 125
    assert peak("NVIDIA L40S") == 362 and peak("NVIDIA L4") == 121
    assert peak("Tesla V100-SXM2-16GB") == 125 and peak("NVIDIA GeForce RTX 4090") == 165
    assert peak("NVIDIA A10G") is None and peak("NVIDIA H100 80GB HBM3 MIG 1g.10gb") is None
    assert peak("Some Future GPU") is None


@pytest.mark.timeout(120)
def test_dry_run_end_to_end_on_cpu(tmp_path):
    work = tmp_path / "work"
    run = run_script("--dry-run", "--workdir", str(work))
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-6000:]
    lines = run.stdout.splitlines()
    assert lines[0].startswith("train.sft on CPU (dry run): a random Llama of ")
    assert lines[1].split() == ["case", "steps", "seconds", "tokens/s", "MFU", "peak", "GPU", "MiB", "peak",
                                "RSS", "MiB"]
    assert "qlora fp32: not run in the dry run (4-bit loading needs CUDA)" in lines
    rows = {}
    for line in lines:
        m = re.match(r"^(sft fp32|fsdp fp32 \(1 rank\))\s+(\d+)\s+([\d.]+)\s+(\d+)\s+n/a \(cpu\)\s+n/a\s+(\d+)$", line)
        if m:
            rows[m.group(1)] = m.groups()[1:]
    assert set(rows) == {"sft fp32", "fsdp fp32 (1 rank)"}, run.stdout
    for steps, seconds, rate, rss in rows.values():
        assert int(steps) == 4 and float(seconds) > 0 and int(rate) > 0 and int(rss) > 50
    assert "NOT SHARDED" not in out and "FAILED" not in out
    # What the rows were read from: the entry point's own files, full batches of 2 x 64 tokens.
    for case, sharding in (("sft", "replicated"), ("fsdp", "fsdp")):
        metrics = json.loads((work / "runs" / case / "metrics.json").read_text())
        assert metrics["global_step"] == 4 and metrics["sharding"] == sharding
        assert metrics["tokens_per_second"] * metrics["train_runtime"] == pytest.approx(4 * 2 * 64)
        assert "peak_gpu_mb_per_rank" not in metrics  # the runs saw no GPU
    config = json.loads((work / "model" / "config.json").read_text())
    tokenizer = json.loads((work / "model" / "tokenizer.json").read_text())
    ids = [*tokenizer["model"]["vocab"].values(), *(t["id"] for t in tokenizer["added_tokens"])]
    assert config["vocab_size"] == max(ids) + 1  # the model's vocabulary is the tokenizer's
