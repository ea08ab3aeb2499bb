"""Host memory of loading a model under FSDP: one reader per node, against every rank reading.

Builds a randomly initialised Llama of about 78 M parameters (310 MB in float32, offline, with the
tiny assets' tokenizer), then runs 2 steps of train.sft with 2 ranks under torchrun three ways:
DDP, FSDP with every rank reading the weights, and FSDP with cpu_ram_efficient_loading (local
rank 0 reads, the others start on the meta device and receive their shards). Prints each rank's
peak resident set size (metrics.json's peak_rss_mb_per_rank) and the non-readers' saving against
DDP and against every rank reading, in model sizes.

    python bench/bench_load_once.py [--layers 6] [--ranks 2]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

RUNS = (("DDP", []),
        ("FSDP, every rank reads", ["--fsdp"]),
        ("FSDP, one reader", ["--fsdp", "--fsdp_config", '{"cpu_ram_efficient_loading": true}']))


def build_model(tiny: Path, out: Path, layers: int) -> int:
    """A Llama of hidden size 1024 with the tiny tokenizer; returns its size in bytes."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    config = AutoConfig.from_pretrained(tiny / "lm")
    config.update({"hidden_size": 1024, "intermediate_size": 2816, "num_hidden_layers": layers,
                   "num_attention_heads": 16, "num_key_value_heads": 16, "head_dim": 64,
                   "tie_word_embeddings": False})
    model = AutoModelForCausalLM.from_config(config)
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(tiny / "lm").save_pretrained(out)
    return sum(p.numel() * p.element_size() for p in model.parameters())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--ranks", type=int, default=2, help="ranks on this one node")
    args = parser.parse_args()
    from train import tiny as tiny_mod

    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", PYTHONPATH=str(REPO))
    # glibc raises its mmap threshold as large blocks are freed, then keeps later freed tensors in
    # its heap: a peak would measure the allocator's retention, not what each strategy holds.
    env.setdefault("MALLOC_MMAP_THRESHOLD_", "131072")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        tiny = tiny_mod.build(work / "tiny", seed=0)
        size = build_model(tiny, work / "model", args.layers)
        print(f"model: {size / 2**20:.0f} MiB of parameters (float32), {args.ranks} ranks on one node, 2 steps,"
              f" MALLOC_MMAP_THRESHOLD_={env['MALLOC_MMAP_THRESHOLD_']}")
        rss = {}
        for name, extra in RUNS:
            out = work / name.split(",")[0].replace(" ", "") / str(len(rss))
            cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(args.ranks),
                   "-m", "train.sft", "--model_name_or_path", str(work / "model"),
                   "--dataset_name", str(tiny / "data" / "text.jsonl"), "--output_dir", str(out),
                   "--max_steps", "2", "--save_strategy", "no", "--per_device_train_batch_size", "1",
                   "--max_length", "64", "--report_to", "none", "--disable_tqdm", "true",
                   # plain SGD: no optimizer state, so the peak is the load's, not Adam's
                   "--optim", "sgd", *extra]
            run = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
            if run.returncode:
                sys.exit(f"{name}: failed\n{(run.stdout + run.stderr)[-3000:]}")
            metrics = json.loads((out / "metrics.json").read_text())
            rss[name] = metrics["peak_rss_mb_per_rank"]
            print(f"{name:<24} peak RSS per rank (MiB): {rss[name]}, all ranks {sum(rss[name]):.0f}"
                  f"  sharding {metrics['sharding']}")
        model = size / 2**20
        others = rss["FSDP, one reader"][1:]  # the ranks that did not read the weights
        saving = sum(rss["DDP"][1:]) / len(others) - sum(others) / len(others)
        readers = sum(rss["FSDP, every rank reads"][1:]) / len(others) - sum(others) / len(others)
        print(f"ranks 1-{args.ranks - 1} (not readers): below DDP's by {saving:.0f} MiB = {saving / model:.2f}x the"
              f" model; below FSDP with every rank reading by {readers:.0f} MiB = {readers / model:.2f}x")


if __name__ == "__main__":
    main()
