"""Recovery from a lost node with a spare inside the allocation, against the requeue that waits in the
queue (issue 31): the same 1,1,2,2 train.ddp_loop job on the local cluster as 1,1,2,2,2 (production
profile), one of component 1's nodes killed outright at step 7 (`localcluster.sh node-kill`):

  spare    --spares 1 (all five nodes held): seconds from the kill to rank 0's next logged step
  requeue  no spares, nothing else queued: the kill, Slurm marking the node down (SlurmdTimeout,
           30 s here; 300 s is Slurm's default), the requeue, the job started again on the spare
           node: seconds from the kill to rank 0's next logged step
  behind   the same, with another user's job waiting for four nodes at a higher priority (a 1-GPU
           sleep of --other seconds): it takes the freed nodes first, ours resumes after it

    python bench/spares.py [--other 120]

Needs root (it brings tests/localcluster.sh up as 1,1,2,2,2, and back as it was). The suite's
tests/e2e/test_spares.py runs the spare line.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from hostlist import expand_hostlist

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from tests import slurm_helpers  # noqa: E402
from tests.e2e.conftest import _layout, _up, render_and_submit  # noqa: E402
from tests.e2e.test_fault_tolerance import ddp_args, wait_progress, wait_with_nudges  # noqa: E402
from tests.e2e.test_spares import first_step_after, kill_node, restore_node  # noqa: E402

UNEVEN = ["--nodes", "4", "--gpus", "1,1,2,2", "--module", "train.ddp_loop", "--env", "SLURMGEN_TEST_STEP_SLEEP=0.3"]


def assets() -> Path:
    out = Path(tempfile.mkdtemp(prefix="spares-assets-"))
    subprocess.run([sys.executable, "-m", "train.tiny", str(out)], check=True, cwd=REPO, capture_output=True)
    return out


def recovery(work: Path, data: Path, spares: int, other: int) -> float:
    """Seconds from killing a node of component 1 to the job's next step."""
    work.mkdir(parents=True)
    job = render_and_submit(work, [*UNEVEN, "--spares", str(spares)], ddp_args(data, work, 30, save_steps=5), wait=False)
    wait_progress(job, work / "run", 7)
    info = slurm_helpers.job_info(job)
    victim = expand_hostlist(info["components"][1]["NodeList"])[0]
    blocker = None
    if other:  # pending from now on (our job holds four of the five nodes), and first in line
        blocker = subprocess.run(["sbatch", "--parsable", "--nodes=4", "--gres=gpu:1", "--mem=1000", f"--wrap=sleep {other}",
                                  f"--output={work}/other-%j.out"], capture_output=True, text=True, check=True).stdout.strip()
        subprocess.run(["scontrol", "update", f"JobId={blocker}", f"Priority={int(info['Priority']) + 1000}"], check=True)
    try:
        killed = kill_node(victim)
        wait_with_nudges(job, timeout=900)
    finally:
        restore_node(victim)
        if blocker:
            slurm_helpers.cancel(blocker)
    return first_step_after(work / "run", killed)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--other", type=int, default=120, help="seconds the other user's job runs")
    a = p.parse_args()
    before = _layout()
    _up("1,1,2,2,2", before, before.get("HOST_NAMES", "same"))
    try:
        work, data = Path(tempfile.mkdtemp(prefix="spares-")), assets()
        spare = recovery(work / "spare", data, 1, 0)
        print(f"spare    {spare:6.1f} s from the kill to the next step (--spares 1, no requeue)", flush=True)
        requeue = recovery(work / "requeue", data, 0, 0)
        print(f"requeue  {requeue:6.1f} s from the kill to the next step (no spares: requeued)", flush=True)
        behind = recovery(work / "behind", data, 0, a.other)
        print(f"behind   {behind:6.1f} s from the kill to the next step (requeued; another job of {a.other} s"
              " took the freed nodes first)", flush=True)
    finally:
        _up(before["GPUS"].replace(" ", ","), before, before.get("HOST_NAMES", "same"))


if __name__ == "__main__":
    main()
