"""Start-up time of the local four-node cluster and wall time of `make demo`'s job, as a newcomer
meets them (issue 4: reported figures, no target).

    python bench/cluster_and_demo.py [--cycles 3]

Needs root and the cluster down (it times `tests/localcluster.sh up` and `down` itself, then
runs tests/demo.sh, which starts and stops the cluster around the job). Run from the venv
(`make bench` does) so that `slurmgen` and the training stack are on PATH.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CLUSTER = REPO / "tests" / "localcluster.sh"


def timed(cmd: list[str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=3, help="up/down cycles to time")
    args = parser.parse_args()
    if subprocess.run([str(CLUSTER), "status"], capture_output=True).returncode == 0:
        sys.exit("bench/cluster_and_demo.py: the local cluster is up; bring it down first "
                 "(tests/localcluster.sh down), as this bench times its start-up")
    ups, downs = [], []
    for _ in range(args.cycles):
        ups.append(timed([str(CLUSTER), "up"]))
        downs.append(timed([str(CLUSTER), "down"]))
    print(f"cluster up (4 slurmds, every node idle): median {statistics.median(ups):5.1f} s"
          f" over {args.cycles} (min {min(ups):.1f}, max {max(ups):.1f})")
    print(f"cluster down:                            median {statistics.median(downs):5.1f} s")
    demo = timed(["bash", "tests/demo.sh"])
    print(f"demo (cluster up, tiny assets, render, sbatch, 30 SFT steps on 6 ranks, result, down):"
          f" {demo:.1f} s")


if __name__ == "__main__":
    main()
