"""Packing against padding to max length: useful (non-pad) tokens per second of train.sft.

Both modes feed batches of the same shape (batch x max_length tokens) to the tiny Llama on
the variable-length tiny text set; packing fills the rows with whole examples (TRL's bfd
packing, padding-free), padding fills them with pad tokens. Dynamic padding (to the longest
example in each batch, TRL's default) is shown for reference. The modes alternate over
several rounds (the machine is noisy); medians and the packing/padding ratio are printed
(target >= 1.5x).

    python bench/bench_packing.py [--rounds 3] [--steps 30] [--max-length 256] [--assets DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

MODES = {
    "packing": ["--packing", "true"],
    "padding to max length": ["--pad_to_multiple_of", "{max_length}"],
    "dynamic padding (reference)": [],
}


def bench_env(cache: Path) -> dict:
    env = dict(os.environ)
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", HF_DATASETS_CACHE=str(cache),
               PYTHONPATH=str(REPO), TOKENIZERS_PARALLELISM="false")
    return env


def assets(path: str | None, work: Path) -> Path:
    if path:
        return Path(path)
    from train import tiny

    return tiny.build(work / "tiny", seed=0)


def run_mode(mode: str, tiny: Path, work: Path, args, env) -> dict:
    out = work / f"run-{len(list(work.glob('run-*')))}"
    extra = [a.format(max_length=args.max_length) for a in MODES[mode]]
    cmd = [sys.executable, "-m", "train.sft", "--model_name_or_path", str(tiny / "lm"),
           "--dataset_name", str(tiny / "data" / "text.jsonl"), "--output_dir", str(out),
           "--max_steps", str(args.steps), "--save_steps", "100000", "--logging_steps", "5",
           "--per_device_train_batch_size", str(args.batch), "--max_length", str(args.max_length),
           "--learning_rate", "1e-3", "--report_to", "none", "--disable_tqdm", "true", *extra]
    subprocess.run(cmd, cwd=REPO, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return json.loads((out / "metrics.json").read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--max-length", dest="max_length", type=int, default=256)
    parser.add_argument("--assets", help="tiny assets dir (built in a temp dir if not given)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        tiny = assets(args.assets, work)
        env = bench_env(work / "hf-cache")
        rates: dict[str, list[float]] = {m: [] for m in MODES}
        losses: dict[str, list[float]] = {m: [] for m in MODES}
        for _ in range(args.rounds):
            for mode in MODES:
                m = run_mode(mode, tiny, work, args, env)
                rates[mode].append(m["tokens_per_second"])
                losses[mode].append(m["last_loss"])

    print(f"train.sft, tiny Llama, batch {args.batch} x max_length {args.max_length}, "
          f"{args.steps} steps, {args.rounds} rounds, 1 CPU process")
    print(f"{'mode':32} {'useful tokens/s (median)':>26} {'last loss':>10}")
    for mode in MODES:
        print(f"{mode:32} {statistics.median(rates[mode]):26.0f} {statistics.median(losses[mode]):10.3f}")
    ratio = statistics.median(rates["packing"]) / statistics.median(rates["padding to max length"])
    print(f"packing / padding to max length: {ratio:.2f}x (target >= 1.5x)")
    ratio_dyn = statistics.median(rates["packing"]) / statistics.median(rates["dynamic padding (reference)"])
    print(f"packing / dynamic padding: {ratio_dyn:.2f}x")


if __name__ == "__main__":
    main()
