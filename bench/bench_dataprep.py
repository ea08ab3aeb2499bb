"""Data preparation time of train.sft with 2 ranks against 1 rank (target <= 1.3x).

Data preparation = loading the data set and SFTTrainer's tokenization, as train.sft reports
it in metrics.json (``data_prep_seconds``, slowest rank; model loading excluded). With 2
ranks, rank 0 prepares and caches first and rank 1 then reads the cache, so the job should
pay for one preparation, not two. Each run starts from an empty datasets cache; the two
set-ups alternate over several rounds and medians are compared.

    python bench/bench_dataprep.py [--rounds 3] [--rows 20000] [--assets DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from train import tiny as tiny_mod  # noqa: E402


def bench_env(cache: Path) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", HF_DATASETS_CACHE=str(cache),
               PYTHONPATH=str(REPO), TOKENIZERS_PARALLELISM="false", OMP_NUM_THREADS="1")
    return env


def run(nproc: int, tiny: Path, data: Path, work: Path, tag: str) -> dict:
    out = work / f"run-{tag}"
    env = bench_env(work / f"cache-{tag}")  # empty cache: every run prepares from scratch
    args = ["--model_name_or_path", str(tiny / "lm"), "--dataset_name", str(data), "--output_dir", str(out),
            "--max_steps", "1", "--save_steps", "100000", "--per_device_train_batch_size", "2",
            "--report_to", "none", "--disable_tqdm", "true"]
    launch = ([sys.executable, "-m", "train.sft"] if nproc == 1 else
              [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc),
               "-m", "train.sft"])
    subprocess.run(launch + args, cwd=REPO, env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return json.loads((out / "metrics.json").read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rows", type=int, default=20000)
    parser.add_argument("--assets", help="tiny assets dir (built in a temp dir if not given)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        tiny = Path(args.assets) if args.assets else tiny_mod.build(work / "tiny", seed=0)
        data = work / "reviews.jsonl"
        tiny_mod.write_jsonl(data, [{"text": r["text"]} for r in tiny_mod.make_reviews(random.Random(1), args.rows)])
        times: dict[int, list[float]] = {1: [], 2: []}
        for i in range(args.rounds):
            for nproc in (1, 2):
                m = run(nproc, tiny, data, work, f"{nproc}-{i}")
                assert m["world_size"] == nproc
                times[nproc].append(m["data_prep_seconds"])

    one, two = statistics.median(times[1]), statistics.median(times[2])
    print(f"train.sft data preparation, {args.rows} rows, empty cache each run, {args.rounds} rounds")
    print(f"1 rank : {one:6.2f} s (median of {', '.join(f'{t:.2f}' for t in times[1])})")
    print(f"2 ranks: {two:6.2f} s (median of {', '.join(f'{t:.2f}' for t in times[2])}; slowest rank)")
    print(f"2 ranks / 1 rank: {two / one:.2f}x (target <= 1.3x)")


if __name__ == "__main__":
    main()
