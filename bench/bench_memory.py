"""Peak memory per rank of the tiny train.sft run (1 rank, then 2 ranks under torchrun).

Each rank reports its peak resident set size (ru_maxrss) and, on GPUs, its peak allocated
CUDA memory; train.sft gathers them into metrics.json (``peak_rss_mb_per_rank``,
``peak_gpu_mb_per_rank``). On the tiny model the figure is mostly the Python, torch and
transformers runtime: the floor each rank pays before the model counts.

    python bench/bench_memory.py [--steps 10] [--assets DIR]
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--assets", help="tiny assets dir (built in a temp dir if not given)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if args.assets:
            tiny = Path(args.assets)
        else:
            from train import tiny as tiny_mod

            tiny = tiny_mod.build(work / "tiny", seed=0)
        env = {k: v for k, v in os.environ.items()
               if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
        env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", HF_DATASETS_CACHE=str(work / "cache"),
                   PYTHONPATH=str(REPO), TOKENIZERS_PARALLELISM="false")
        print(f"train.sft on the tiny Llama (batch 4, {args.steps} steps), text.jsonl")
        for nproc in (1, 2):
            out = work / f"run-{nproc}"
            sft = ["--model_name_or_path", str(tiny / "lm"), "--dataset_name", str(tiny / "data" / "text.jsonl"),
                   "--output_dir", str(out), "--max_steps", str(args.steps), "--save_steps", str(args.steps),
                   "--per_device_train_batch_size", "4", "--report_to", "none", "--disable_tqdm", "true"]
            launch = ([sys.executable, "-m", "train.sft"] if nproc == 1 else
                      [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
                       str(nproc), "-m", "train.sft"])
            subprocess.run(launch + sft, cwd=REPO, env=env, check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            m = json.loads((out / "metrics.json").read_text())
            rss = ", ".join(f"rank {r}: {mb:.0f} MiB" for r, mb in enumerate(m["peak_rss_mb_per_rank"]))
            line = f"{nproc} rank{'s' if nproc > 1 else ''}: peak RSS {rss}"
            if m.get("peak_gpu_mb_per_rank"):
                line += "; peak GPU " + ", ".join(f"{mb:.0f} MiB" for mb in m["peak_gpu_mb_per_rank"])
            print(line)


if __name__ == "__main__":
    main()
