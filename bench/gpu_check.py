"""GPU check: throughput and MFU of the GPU-only paths of train.sft, on one NVIDIA GPU, offline.

Builds a randomly initialised Llama of about 0.5 B parameters (hidden 2048, 10 layers, the tiny
assets' byte-level BPE tokenizer and vocabulary, saved with save_pretrained to a temp dir) and a
text set whose every row is longer than --max-length tokens (so every batch is exactly batch x
max_length tokens, no padding), then runs three cases, each for --steps optimizer steps:

  * sft:   python -m train.sft, the entry point's GPU defaults (bf16 mixed precision, fp16 on
           GPUs without hardware bf16; TRL's activation checkpointing);
  * qlora: the same with --load_in_4bit --use_peft --lora_target_modules all-linear (skipped,
           with one line saying why, where bitsandbytes cannot be imported);
  * fsdp:  torchrun --standalone --nproc-per-node=1 -m train.sft ... --fsdp.

Figures come from what the entry point writes in its --output_dir: steps, seconds (the train
loop, warm-up included: metrics.json's train_runtime), non-padding tokens per step (metrics.json's
tokens_per_second x train_runtime / global_step) and the peak allocated GPU memory
(peak_gpu_mb_per_rank); tokens/s and MFU are over the steps after --warmup (the time stamps of
progress.jsonl), so that CUDA start-up and kernel selection do not count. MFU = tokens/s x model
FLOPs per token / the GPU's dense peak (bf16; fp16 for V100 and T4) from PEAK_TFLOPS, looked up by
torch.cuda.get_device_name(); model FLOPs per token are 6 N (N: every parameter of the model), 4 N
for QLoRA (its frozen base gets no weight gradients); attention's own FLOPs and the recomputation
of activation checkpointing are not counted. An unknown GPU (or a MIG slice) prints
"n/a (unknown peak)".

    bench/gpu_check.sh [--steps 30] [--batch 8] [--max-length 1024] [--warmup 5] [--workdir DIR]
    bench/gpu_check.sh --dry-run    # or GPU_CHECK_DRY_RUN=1: CPU, a tiny model, fp32, sft and fsdp only

The dry run exists so that tests/test_gpu_check.py can run the whole script on a machine without
a GPU; its figures mean nothing. Exit status: 0, 1 if a case failed, 2 without CUDA (not dry run).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

NO_CUDA = ("bench/gpu_check.sh: no CUDA GPU here (torch.cuda.is_available() is False); "
           "run it on a machine with one GPU")
# Dense (no sparsity) peak TFLOPS in bf16 (fp16 where the GPU has no bf16), by device name; the
# first pattern that matches wins, so the more specific names come first.
PEAK_TFLOPS = (
    (r"\bGH200\b|\bH200\b", 989.0),
    (r"\bH100\b.*\bPCIe\b", 756.0),
    (r"\bH100\b.*\bNVL\b", 835.0),
    (r"\bH100\b|\bH800\b", 989.0),
    (r"\bA100\b|\bA800\b", 312.0),
    (r"\bL40S\b", 362.0),
    (r"\bL40\b", 181.0),
    (r"\bL4\b", 121.0),
    (r"\bA10\b", 125.0),
    (r"\bRTX 4090\b", 165.0),
    (r"\bRTX A6000\b", 155.0),
    (r"\bV100", 125.0),  # fp16
    (r"\bT4\b", 65.0),  # fp16
)
# Launcher and Slurm variables: none may leak into the runs (under srun they would make
# train.distenv see a Slurm task of some other step).
DIST_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR",
             "MASTER_PORT", "TORCHELASTIC_RUN_ID", "SLURMGEN_RANK_OFFSET", "SLURMGEN_WORLD_SIZE",
             "SLURMGEN_STOP_FILE", "SLURMGEN_OUTCOME_FILE")
# 516.5 M parameters with the tiny tokenizer's vocabulary (659 tokens); the dry run's, 0.5 M.
GPU_MODEL = {"hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 10,
             "num_attention_heads": 16, "num_key_value_heads": 16, "head_dim": 128}
DRY_MODEL = {"hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2,
             "num_attention_heads": 4, "num_key_value_heads": 4, "head_dim": 32}


def peak_tflops(name: str) -> float | None:
    if "MIG" in name:  # a slice of a GPU: its share of the peak is not in the table
        return None
    for pattern, tflops in PEAK_TFLOPS:
        if re.search(pattern, name):
            return tflops
    return None


def build_model(tiny: Path, out: Path, shape: dict, max_length: int, cuda: bool) -> int:
    """A random Llama of the given shape with the tiny tokenizer; returns its parameter count."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny / "lm")
    tok.model_max_length = max_length
    config = AutoConfig.from_pretrained(tiny / "lm")
    config.update({**shape, "vocab_size": len(tok), "tie_word_embeddings": False,
                   "max_position_embeddings": max(max_length, 2048)})
    torch.manual_seed(0)
    # Random initialisation is quicker on the GPU; saved in bf16 (half the bytes to write and
    # read); train.sft loads it in float32 (TRL's --dtype default) unless told otherwise.
    with torch.device("cuda" if cuda else "cpu"):
        model = AutoModelForCausalLM.from_config(config)
    params = sum(p.numel() for p in model.parameters())
    model.to(torch.bfloat16 if cuda else torch.float32).save_pretrained(out)
    tok.save_pretrained(out)
    del model
    if cuda:
        torch.cuda.empty_cache()
    return params


def write_long_text(path: Path, model_dir: Path, rows: int, max_length: int) -> None:
    """Rows of the tiny reviews run together, each of more than max_length tokens: truncated to
    max_length, every batch is full (no padding), so every step trains on batch x max_length tokens."""
    import random

    from transformers import AutoTokenizer

    from train import tiny as tiny_mod

    tok = AutoTokenizer.from_pretrained(model_dir)
    rng = random.Random(0)
    with open(path, "w") as fh:
        for _ in range(rows):
            text = ""
            while len(tok(text)["input_ids"]) <= max_length:
                text += " ".join(tiny_mod.review(rng, rng.randrange(2)) for _ in range(max_length // 32 + 1)) + " "
            fh.write(json.dumps({"text": text.strip()}) + "\n")


def run_env(work: Path, one_gpu: str | None) -> dict[str, str]:
    """The runs' environment: offline, a private datasets cache, the one GPU (none: "")."""
    env = {k: v for k, v in os.environ.items() if k not in DIST_VARS and not k.startswith("SLURM_")}
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               HF_DATASETS_CACHE=str(work / "hf-cache"), TOKENIZERS_PARALLELISM="false",
               PYTHONUNBUFFERED="1", PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    if one_gpu is not None:
        # One process on several visible GPUs: the Trainer would wrap the model in DataParallel.
        env["CUDA_VISIBLE_DEVICES"] = one_gpu
    return env


def first_visible_gpu() -> str | None:
    """The GPU to keep visible when more than one is; None to leave CUDA_VISIBLE_DEVICES alone."""
    import torch

    raw = os.environ.get("CUDA_VISIBLE_DEVICES")
    if raw is not None:
        ids = [d.strip() for d in raw.split(",") if d.strip()]
        return ids[0] if len(ids) > 1 else None
    return "0" if torch.cuda.device_count() > 1 else None


def steady_rate(out: Path, tokens_per_step: float, warmup: int) -> float | None:
    """Tokens/s between the progress.jsonl lines of step `warmup` and of the last step."""
    path = out / "progress.jsonl"
    if not path.is_file():
        return None
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    start = next((ln for ln in lines if ln["step"] == warmup), None)
    end = lines[-1] if lines else None
    if start is None or end is None or end["step"] <= start["step"] or end["time"] <= start["time"]:
        return None
    return (end["step"] - start["step"]) * tokens_per_step / (end["time"] - start["time"])


class Case(NamedTuple):
    name: str
    launch: list[str]  # the command up to the entry point's own arguments
    extra: list[str]  # arguments of this case
    flops_per_param: int  # model FLOPs per token and parameter: 6 training everything, 4 a frozen base


def cases(dry_run: bool, precision: str) -> list[Case]:
    sft = [sys.executable, "-m", "train.sft"]
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=1",
                "-m", "train.sft"]
    # The dry run turns activation checkpointing on as TRL does on GPUs, to run the same path.
    same_as_gpu = ["--gradient_checkpointing", "true"] if dry_run else []
    dtype = "bfloat16" if precision == "bf16" else "float16"  # QLoRA's compute dtype
    return [
        Case(f"sft {precision}", sft, same_as_gpu, 6),
        Case(f"qlora {precision}", sft, ["--load_in_4bit", "--use_peft", "--lora_target_modules", "all-linear",
                                         "--dtype", dtype], 4),
        Case(f"fsdp {precision} (1 rank)", torchrun, ["--fsdp", *same_as_gpu], 6),
    ]


def bitsandbytes_problem() -> str | None:
    """Why bitsandbytes cannot be used here, or None."""
    import importlib

    try:
        importlib.import_module("bitsandbytes")
    except Exception as exc:  # noqa: BLE001 - missing, or installed without a working CUDA build
        first = str(exc).strip().splitlines()
        return f"{type(exc).__name__}: {first[0] if first else repr(exc)}"
    return None


class Bench(NamedTuple):
    work: Path
    model: Path
    data: Path
    params: int
    env: dict
    steps: int
    batch: int
    max_length: int
    warmup: int
    timeout: float
    peak: float | None  # TFLOPS; None: unknown (or CPU)
    cuda: bool


COLUMNS = (f"{'case':<24} {'steps':>5} {'seconds':>8} {'tokens/s':>10} {'MFU':>19} "
           f"{'peak GPU MiB':>12} {'peak RSS MiB':>12}")


def run_case(case: Case, b: Bench) -> tuple[bool, str]:
    """Run one case; (ok, its line of the table)."""
    label = case.name.split()[0]
    out, log = b.work / "runs" / label, b.work / f"{label}.log"
    cmd = [*case.launch, "--model_name_or_path", str(b.model), "--dataset_name", str(b.data),
           "--output_dir", str(out), "--max_steps", str(b.steps), "--save_strategy", "no",
           "--per_device_train_batch_size", str(b.batch), "--max_length", str(b.max_length),
           "--logging_steps", "1", "--learning_rate", "1e-4", "--report_to", "none",
           "--disable_tqdm", "true", *case.extra]
    try:
        with open(log, "w") as fh:
            rc: int | str = subprocess.run(cmd, cwd=REPO, env=b.env, stdout=fh, stderr=subprocess.STDOUT,
                                           timeout=b.timeout).returncode
    except subprocess.TimeoutExpired:
        rc = f"timed out after {b.timeout:.0f} s"
    if rc != 0 or not (out / "metrics.json").is_file():
        tail = log.read_text(errors="replace").splitlines()[-25:]
        return False, "\n".join([f"{case.name}: FAILED ({rc if isinstance(rc, str) else f'exit status {rc}'}); "
                                 f"the end of its log:", *(f"    {line}" for line in tail)])
    m = json.loads((out / "metrics.json").read_text())
    done = m["global_step"]
    tokens_per_step = (m["tokens_per_second"] or 0.0) * m["train_runtime"] / max(done, 1)
    rate = steady_rate(out, tokens_per_step, b.warmup) or m["tokens_per_second"] or 0.0
    if b.peak is not None:
        mfu = f"{100 * rate * case.flops_per_param * b.params / (b.peak * 1e12):.1f}%"
    else:
        mfu = "n/a (unknown peak)" if b.cuda else "n/a (cpu)"
    gpu_mb = (m.get("peak_gpu_mb_per_rank") or [None])[0]
    name, ok = case.name, True
    if case.name.startswith("fsdp") and m.get("sharding") != "fsdp":  # the Trainer fell back to no FSDP
        name, ok = f"{name} NOT SHARDED", False
    return ok, (f"{name:<24} {done:>5} {m['train_runtime']:>8.1f} {rate:>10.0f} {mfu:>19} "
                f"{'n/a' if gpu_mb is None else f'{gpu_mb:.0f}':>12} {max(m['peak_rss_mb_per_rank']):>12.0f}")


def main() -> int:
    parser = argparse.ArgumentParser(prog="bench/gpu_check.sh", description=__doc__.split("\n")[0])
    parser.add_argument("--dry-run", action="store_true",
                        default=os.environ.get("GPU_CHECK_DRY_RUN", "").lower() in ("1", "true", "yes"),
                        help="on CPU: a tiny model, fp32, the sft and fsdp cases only (for the tests)")
    parser.add_argument("--steps", type=int, help="optimizer steps per case (default 30; dry run 4)")
    parser.add_argument("--batch", type=int, help="rows per step (default 8; dry run 2)")
    parser.add_argument("--max-length", dest="max_length", type=int, help="tokens per row (default 1024; dry run 64)")
    parser.add_argument("--warmup", type=int, help="steps left out of tokens/s and MFU (default 5; dry run 1)")
    parser.add_argument("--timeout", type=float, default=240, help="seconds allowed per case (default 240)")
    parser.add_argument("--workdir", help="keep the model, data, runs and logs here (default: a temp dir, removed)")
    args = parser.parse_args()
    dry = args.dry_run
    steps = args.steps or (4 if dry else 30)
    batch = args.batch or (2 if dry else 8)
    max_length = args.max_length or (64 if dry else 1024)
    warmup = args.warmup if args.warmup is not None else (1 if dry else 5)
    if steps <= warmup:
        parser.error(f"--steps ({steps}) must be more than --warmup ({warmup})")

    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # before huggingface_hub is imported
    import torch
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    cuda = torch.cuda.is_available() and not dry
    if not cuda and not dry:
        print(NO_CUDA, file=sys.stderr)
        return 2
    if cuda:
        one_gpu = first_visible_gpu()
        device = torch.cuda.get_device_name(0)  # the first visible GPU: the one the runs get
        precision = "bf16" if torch.cuda.is_bf16_supported(including_emulation=False) else "fp16"
        peak = peak_tflops(device)
    else:  # the runs must not see a GPU either, or they would train on it
        one_gpu, device, precision, peak = "", "CPU (dry run)", "fp32", None

    t_start = time.time()
    work = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="gpu_check-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        from train import tiny as tiny_mod

        tiny = tiny_mod.build(work / "tiny", seed=0)
        params = build_model(tiny, work / "model", DRY_MODEL if dry else GPU_MODEL, max_length, cuda)
        write_long_text(work / "long.jsonl", work / "model", rows=min(batch * steps, 512), max_length=max_length)
        b = Bench(work, work / "model", work / "long.jsonl", params, run_env(work, one_gpu), steps, batch,
                  max_length, warmup, args.timeout, peak, cuda)
        print(f"train.sft on {device}: a random Llama of {params / 1e6:.1f} M parameters, {precision}, "
              f"batch {batch} x {max_length} tokens, {steps} steps (model and data built in "
              f"{time.time() - t_start:.0f} s)")
        print(COLUMNS, flush=True)
        ok = True
        for case in cases(dry, precision):
            skip = None
            if case.name.startswith("qlora"):
                problem = None if dry else bitsandbytes_problem()
                if dry:
                    skip = "not run in the dry run (4-bit loading needs CUDA)"
                elif problem:
                    skip = f"skipped, bitsandbytes cannot be imported ({problem})"
            if skip:
                print(f"{case.name}: {skip}", flush=True)
                continue
            case_ok, line = run_case(case, b)
            ok = ok and case_ok
            print(line, flush=True)
        print(f"seconds: the whole train loop (metrics.json); tokens/s and MFU: steps {warmup + 1}-{steps} "
              f"(progress.jsonl time stamps, metrics.json's tokens per step)")
        against = f"{peak:.0f} TFLOPS, the {precision} peak of {device}" if peak is not None else "no known peak"
        print(f"MFU: 6 N FLOPs per token (QLoRA 4 N), N = {params / 1e6:.1f} M parameters, against {against}")
        print(f"total {time.time() - t_start:.0f} s")
    finally:
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
