"""Overhead of the generated script: sbatch-to-end wall time of the 1,1,2,2 tiny SFT job, rendered
by slurmgen, against a minimal hand-written sbatch script that launches the same training the same
way (one srun + torchrun per het component). Runs alternate in one session; prints medians and the
ratio (target <= 1.10), with and without the preflight step. Needs the local cluster (or Slurm).

    python bench/script_overhead.py [--pairs 3] [--steps 12]
"""
import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from tests import slurm_helpers  # noqa: E402

BIN = Path(sys.executable).parent
HAND_WRITTEN = """#!/bin/bash
#SBATCH --job-name=hand
#SBATCH --output={logs}/hand-%j.out
#SBATCH --nodes=2 --ntasks-per-node=1 --cpus-per-task=2 --gres=gpu:1
#SBATCH hetjob
#SBATCH --nodes=2 --ntasks-per-node=1 --cpus-per-task=4 --gres=gpu:2
source {bin}/activate
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false OMP_NUM_THREADS=2
MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST_HET_GROUP_0" | head -n 1)
MASTER_PORT=$(( 20000 + SLURM_JOB_ID % 10000 ))
srun --het-group=0 --nodes=2 --ntasks=2 --cpus-per-task=2 bash -c 'exec torchrun --node-rank=$SLURM_NODEID "$@"' torchrun \\
    --nnodes=4 --nproc-per-node=1 --master-addr=$MASTER_ADDR --master-port=$MASTER_PORT -m train.sft {args} &
srun --het-group=1 --nodes=2 --ntasks=2 --cpus-per-task=4 bash -c 'exec torchrun --node-rank=$((2 + SLURM_NODEID)) "$@"' torchrun \\
    --nnodes=4 --nproc-per-node=2 --master-addr=$MASTER_ADDR --master-port=$MASTER_PORT -m train.sft {args} &
wait
"""


def train_args(assets: Path, run: Path, steps: int) -> list[str]:
    return ["--model_name_or_path", str(assets / "lm"), "--dataset_name", str(assets / "data" / "text.jsonl"),
            "--output_dir", str(run), "--max_steps", str(steps), "--save_steps", str(steps),
            "--per_device_train_batch_size", "4", "--logging_steps", "1", "--report_to", "none"]


def timed_job(script: Path) -> float:
    start = time.perf_counter()
    job = slurm_helpers.submit(script, cwd=REPO)
    info = slurm_helpers.wait_job(job, 900)
    elapsed = time.perf_counter() - start
    if info["State"] != "COMPLETED":
        raise SystemExit(f"{script.name}: job {job} ended {info['State']}")
    return elapsed


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=12)
    opts = parser.parse_args()
    ok, reason = slurm_helpers.cluster_available()
    if not ok:
        raise SystemExit(f"no Slurm cluster: {reason}")
    work = Path(tempfile.mkdtemp(prefix="slurmgen-overhead-"))
    assets = work / "assets"
    subprocess.run([sys.executable, "-m", "train.tiny", str(assets)], check=True, cwd=REPO,
                   stdout=subprocess.DEVNULL)
    (work / "logs").mkdir()
    scripts = {}
    for name, extra in (("generated", []), ("generated-no-preflight", ["--no-preflight"])):
        run = work / f"run-{name}"
        scripts[name] = (work / f"{name}.sh", run)
        subprocess.run([str(BIN / "slurmgen"), "render", "--nodes", "4", "--gpus", "1,1,2,2",
                        "--cpus-per-gpu", "2", "--log-dir", str(work / "logs"), "-o", str(work / f"{name}.sh"),
                        "--setup", f"source {BIN / 'activate'}", "--env", "HF_HUB_OFFLINE=1",
                        "--env", "HF_DATASETS_OFFLINE=1", "--env", "TOKENIZERS_PARALLELISM=false",
                        *extra, "--", *train_args(assets, run, opts.steps)],
                       check=True, stdout=subprocess.DEVNULL)
    hand_run = work / "run-hand"
    hand = work / "hand.sh"
    hand.write_text(HAND_WRITTEN.format(logs=work / "logs", bin=BIN,
                                        args=" ".join(train_args(assets, hand_run, opts.steps))))
    scripts["hand-written"] = (hand, hand_run)
    times = {name: [] for name in scripts}
    timed_job(hand)  # warm-up, discarded: the first job pays for cold caches
    subprocess.run(["rm", "-rf", str(hand_run)], check=True)
    for _ in range(opts.pairs):
        for name, (script, run) in scripts.items():
            subprocess.run(["rm", "-rf", str(run)], check=True)  # fresh start every time
            times[name].append(timed_job(script))
    base = statistics.median(times["hand-written"])
    for name, values in times.items():
        median = statistics.median(values)
        print(f"{name:<24} median {median:6.1f} s over {len(values)} runs"
              f" ({', '.join(f'{v:.1f}' for v in values)}); ratio to hand-written {median / base:.2f}")
    print("target: generated / hand-written <= 1.10")


if __name__ == "__main__":
    main()
