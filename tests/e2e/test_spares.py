"""Spare nodes (issue 31), end to end: a 1,1,2,2 job with --spares 1 on the 1,1,2,2,2 cluster holds all
five nodes; node3 is killed outright mid-run (its slurmd, steps and ranks: `localcluster.sh
node-kill`), and the job goes on inside its allocation: node3 is found lost by a probe step (long
before Slurm's SlurmdTimeout marks it down), replaced by node5, every component restarts from the
newest checkpoint, and the job finishes without ever being requeued. bench/spares.py measures the
same recovery against a requeue that waits behind another job.
"""
from __future__ import annotations

import json
import re
import subprocess
import time

from hostlist import expand_hostlist
from tests import slurm_helpers
from tests.e2e.conftest import CLUSTER, JobRun, render_and_submit
from tests.e2e.test_fault_tolerance import ddp_args, job_log, progress_steps, wait_progress
from tests.e2e.test_hangs import UNEVEN, finished_every_step


def kill_node(name: str) -> float:
    proc = subprocess.run(["bash", str(CLUSTER), "node-kill", name], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return time.time()


def restore_node(name: str) -> None:
    subprocess.run(["bash", str(CLUSTER), "node-restart", name], capture_output=True, text=True)
    for _ in range(60):  # back in service (ReturnToService=2) once Slurm had marked it down
        subprocess.run(["scontrol", "update", f"nodename={name}", "state=resume"], capture_output=True)
        state = subprocess.run(["sinfo", "-h", "-n", name, "-o", "%T"], capture_output=True, text=True).stdout
        if "idle" in state or "alloc" in state or "mix" in state:
            return
        time.sleep(1)


def first_step_after(run_dir, moment: float) -> float:
    """Seconds from moment to the first step rank 0 logged after it."""
    times = [json.loads(line)["time"] for line in (run_dir / "progress.jsonl").read_text().splitlines() if line.strip()]
    return min(t for t in times if t > moment) - moment


def test_a_killed_node_is_replaced_by_the_spare_without_a_requeue(spare_node, assets, tmp_path):
    steps = 30
    job_id = render_and_submit(tmp_path, [*UNEVEN, "--spares", "1", "--env", "SLURMGEN_TEST_STEP_SLEEP=0.3"],
                               ddp_args(assets, tmp_path, steps, save_steps=5), wait=False)
    wait_progress(job_id, tmp_path / "run", 7)
    held = slurm_helpers.job_info(job_id)
    # A node of component 1 (the batch script runs on component 0's first node, which Slurm ends
    # the job with), and the spare's node
    _, comp1, spares = (expand_hostlist(c["NodeList"]) for c in held["components"])
    victim, spare = comp1[0], spares[0]
    try:
        killed = kill_node(victim)
        job = JobRun(job_id, slurm_helpers.wait_job(job_id, timeout=600), tmp_path)
    finally:
        restore_node(victim)
    log = job_log(tmp_path, job_id)
    recovered = first_step_after(tmp_path / "run", killed)
    print(f"{victim} killed: training stepped again {recovered:.1f} s later, on the spare {spare}")
    finished_every_step(tmp_path, job, steps)
    assert re.search(rf"slurmgen: failure 1 of at most 2 \(node on {victim}\): restarting every component inside the"
                     rf" allocation from the newest checkpoint; {victim} \(no step started[^)]*\) replaced by spare"
                     rf" {spare}", log), log[-6000:]
    assert "requeue" not in log.lower(), log[-6000:]
    assert [c["Restarts"] for c in job.info["Components"]] == ["0"] * 3, job.info
    assert re.search(r"resuming from \S+checkpoint-\d+ at step [1-9]\d*", log), log[-6000:]
    assert recovered < 90, log[-6000:]
    # Every step ran, and none after the restart ran twice except those after the checkpoint.
    assert sorted(set(progress_steps(tmp_path / "run"))) == list(range(1, steps + 1))
