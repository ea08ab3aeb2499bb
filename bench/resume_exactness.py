"""Exact resume, the larger matrix: per entry point, world size and option, the largest difference
between the per-step losses of an interrupted and resumed run and those of an uninterrupted one.

Each case runs once uninterrupted, then for every interruption step k: stopped by the stop file at
k (SLURMGEN_TEST_STOP_AT, the time-limit and preemption path) and resumed; and crashed at k
(SLURMGEN_TEST_CRASH_ON) with periodic checkpoints every --save-steps and resumed. Every logged
loss, those of the crashed runs included, is compared with the uninterrupted run's at its step.
The tiny Llama draws random numbers (attention dropout 0.1, BERT has its own); the text data is
cut to --rows rows so that runs cross epoch boundaries. CPU, gloo, torchrun on this machine.

    python bench/resume_exactness.py [--steps 8] [--save-steps 3] [--at 2,5] [--every] [--all]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from train_fixtures import ARGS, subprocess_env, torchrun_cmd  # noqa: E402

CASES = [  # module, ranks, extra arguments
    ("train.ddp_loop", 1, ["--batch_size", "4"]),
    ("train.ddp_loop", 2, ["--batch_size", "4"]),
    ("train.ddp_loop", 3, ["--batch_size", "4"]),
    ("train.ddp_loop", 2, ["--batch_size", "4", "--fsdp"]),
    ("train.ddp_loop", 2, ["--batch_size", "4", "--dataloader_num_workers", "2"]),
    ("train.sft", 1, []),
    ("train.sft", 2, []),
    ("train.sft", 3, []),
    ("train.sft", 2, ["--packing", "--max_length", "128", "--per_device_train_batch_size", "2"]),
    ("train.sft", 2, ["--dataloader_num_workers", "2"]),
    ("train.sft", 2, ["--fsdp", "--lr_scheduler_type", "constant"]),
    ("train.classify", 1, []),
    ("train.classify", 2, []),
    ("train.classify", 2, ["--dataloader_num_workers", "2"]),
]
QUICK = [0, 1, 5, 8, 11, 12]


def assets(root: Path, rows: int) -> Path:
    from train import tiny

    built = tiny.build(root / "tiny", seed=0)
    config = json.loads((built / "lm" / "config.json").read_text())
    config["attention_dropout"] = 0.1
    (built / "lm" / "config.json").write_text(json.dumps(config))
    text = built / "data" / "text.jsonl"
    text.write_text("\n".join(text.read_text().splitlines()[:rows]) + "\n")
    return built


def losses(out: Path) -> list[tuple[int, float]]:
    lines = (out / "progress.jsonl").read_text().splitlines()
    return [(json.loads(ln)["step"], json.loads(ln)["loss"]) for ln in lines if ln.strip()]


def run(module, tiny, out, steps, save_steps, nproc, extra, env):
    args = ARGS[module](tiny, out, steps, save_steps, *extra)
    if module == "train.classify":
        args += ["--logging_steps", "1", "--max_train_samples", "48", "--per_device_train_batch_size", "4"]
    cmd = [sys.executable, "-m", module, *args] if nproc == 1 else torchrun_cmd(nproc, "--standalone", "-m", module, *args)
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    return done.returncode, done.stdout + done.stderr


def case(module, nproc, extra, tiny, work, steps, save_steps, at, cache):
    env = subprocess_env(cache, SLURMGEN_PEER_LOSS_WAIT="0")
    ref_dir = work / "reference"
    rc, output = run(module, tiny, ref_dir, steps, 1000, nproc, extra, env)
    if rc:
        raise SystemExit(output[-3000:])
    ref = dict(losses(ref_dir))
    worst: dict[str, float] = {}
    for kind in ("stop", "crash"):
        for k in at:
            out, stop = work / f"{kind}-{k}", work / f"stop-{kind}-{k}"
            hook = ({"SLURMGEN_STOP_FILE": str(stop), "SLURMGEN_TEST_STOP_AT": str(k)} if kind == "stop"
                    else {"SLURMGEN_TEST_CRASH_ON": f"{socket.gethostname()}:{k}"})
            rc, output = run(module, tiny, out, steps, save_steps, nproc, extra, {**env, **hook})
            if (rc != 0) != (kind == "crash"):
                raise SystemExit(output[-3000:])
            rc, output = run(module, tiny, out, steps, save_steps, nproc, extra, env)
            fresh = kind == "crash" and k <= save_steps  # crashed before its first checkpoint
            if rc or ("fresh start" if fresh else "is exact") not in output:
                raise SystemExit(output[-3000:])
            got = losses(out)
            assert {s for s, _ in got} == set(ref), got
            worst[kind] = max([worst.get(kind, 0.0)] + [abs(loss - ref[s]) for s, loss in got])
    return worst


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--save-steps", type=int, default=3)
    p.add_argument("--at", default="2,5", help="interruption steps, comma-separated")
    p.add_argument("--every", action="store_true", help="interrupt at every step 1..steps-1")
    p.add_argument("--rows", type=int, default=24)
    p.add_argument("--all", action="store_true", help="every case (default: six, two per entry point)")
    a = p.parse_args()
    at = list(range(1, a.steps)) if a.every else [int(x) for x in a.at.split(",")]
    with tempfile.TemporaryDirectory(prefix="resume-bench-") as tmp:
        root = Path(tmp)
        os.environ["HF_DATASETS_CACHE"] = str(root / "cache" / "datasets")
        tiny = assets(root, a.rows)
        print(f"{a.steps} steps, periodic checkpoints every {a.save_steps}, interrupted at {at}; max |loss - uninterrupted|")
        for index, (module, nproc, extra) in enumerate(CASES):
            if not a.all and index not in QUICK:
                continue
            work = root / f"case-{index}"
            worst = case(module, nproc, extra, tiny, work, a.steps, a.save_steps, at, root / "cache")
            shutil.rmtree(work, ignore_errors=True)
            print(f"{module:15} ranks {nproc}  {' '.join(extra) or '(defaults)':60} stop {worst['stop']:.3g}"
                  f"  crash {worst['crash']:.3g}", flush=True)


if __name__ == "__main__":
    main()
