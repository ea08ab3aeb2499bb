"""Submission latency: `python -m slurmgen.submit --detach` against `slurmgen render` + `sbatch --parsable`.

Latency is command start to job accepted: the moment the job id is printed. Both submit the same
1,1,2,2 job to the running Slurm cluster (tests/localcluster.sh up), alternated in one run (the
machine is noisy); every job is cancelled at once, outside the timing. Prints medians and ratio.

    python bench/submit_latency.py [--runs 10]
"""
import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
JOB = ["--nodes", "4", "--gpus", "1,1,2,2", "--cpus-per-gpu", "1", "--job-name", "bench-latency"]
TRAIN = ["--", "--model_name_or_path", "lm", "--output_dir", "run", "--max_steps", "1"]


def until_job_id(cmd, cwd, pattern) -> tuple[float, str]:
    """Seconds from starting cmd to the line that names the job id; the id."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in proc.stdout:
        match = re.match(pattern, line)
        if match:
            elapsed = time.perf_counter() - start
            proc.communicate()
            return elapsed, match.group(1)
    raise RuntimeError(f"{cmd[0]}: no job id: {proc.communicate()[1]}")


def via_submit(work) -> tuple[float, str]:
    cmd = [sys.executable, "-m", "slurmgen.submit", "--detach", "--folder", "submitit", *JOB, *TRAIN]
    return until_job_id(cmd, work, r"submitted job (\d+)")


def via_render_sbatch(work) -> tuple[float, str]:
    start = time.perf_counter()
    subprocess.run([str(BIN / "slurmgen"), "render", "-o", "job.sh", "--log-dir", "logs", *JOB, *TRAIN],
                   cwd=work, check=True, capture_output=True)
    rendered = time.perf_counter() - start
    seconds, job_id = until_job_id(["sbatch", "--parsable", "job.sh"], work, r"(\d+)")
    return rendered + seconds, job_id


def cancel(job_id: str) -> None:
    subprocess.run(["scancel", job_id], capture_output=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        for how in (via_submit, via_render_sbatch):  # warm the page cache for both
            cancel(how(work)[1])
        ours, theirs = [], []
        for _ in range(args.runs):
            for how, times in ((via_submit, ours), (via_render_sbatch, theirs)):
                seconds, job_id = how(work)
                cancel(job_id)
                times.append(seconds)
    mo, mt = statistics.median(ours), statistics.median(theirs)
    print(f"python -m slurmgen.submit --detach:   median {mo * 1000:7.1f} ms over {args.runs} runs"
          f" (min {min(ours) * 1000:.1f}, max {max(ours) * 1000:.1f})")
    print(f"slurmgen render + sbatch --parsable:  median {mt * 1000:7.1f} ms over {args.runs} runs"
          f" (min {min(theirs) * 1000:.1f}, max {max(theirs) * 1000:.1f})")
    print(f"ratio submit/(render+sbatch):         {mo / mt:.2f}")


if __name__ == "__main__":
    main()
