"""What a production-configured cluster adds (tests/localcluster.sh's production profile): real
preemption by a job in a higher-priority partition, and memory limits that kill a rank.

Both need the production profile; under CI=true they fail rather than skip without it.
"""
import re
import time

import pytest

from tests import slurm_helpers
from tests.e2e.conftest import JobRun, render_and_submit
from tests.e2e.test_fault_tolerance import (UNEVEN, assert_stopped_and_resumed, ddp_args, job_log,
                                            wait_progress, wait_with_nudges)
from tests.e2e.test_isolation import production


@pytest.mark.core
@pytest.mark.timeout(420)
def test_preempted_by_an_urgent_job_checkpoints_requeues_and_finishes(cluster, assets, tmp_path):
    """A 1,1,2,2 training job in partition debug; a job in partition urgent (higher PriorityTier)
    needs node1's only GPU. Slurm preempts the training job, sending its --signal first
    (preempt_send_user_signal): every rank checkpoints, the script requeues the job without using
    up a restart, the urgent job runs, and the training job resumes and finishes every step. The
    model is sharded (train.ddp_loop --fsdp): its gathered checkpoint resumes it, each of the 6 ranks
    holding a sixth of the parameters."""
    production(cluster)
    steps = 40
    # 0.5 s a step in the first run: the preemption lands mid-run however fast the steps
    job_id = render_and_submit(tmp_path, [*UNEVEN, "--module", "train.ddp_loop", "--env", "SLURMGEN_TEST_STEP_SLEEP=0.5"],
                               [*ddp_args(assets, tmp_path, steps, save_steps=100), "--fsdp"], wait=False)
    urgent = None
    try:
        wait_progress(job_id, tmp_path / "run", 4)
        urgent_script = tmp_path / "urgent.sh"
        urgent_script.write_text("#!/bin/bash\nsleep 3\n")
        urgent = slurm_helpers.submit(urgent_script, "-p", "urgent", "-N1", "-w", "node1", "--gres=gpu:1",
                                      "-o", "/dev/null")
        info = wait_with_nudges(job_id, timeout=360)
    finally:
        slurm_helpers.cancel(job_id)
        if urgent:
            slurm_helpers.cancel(urgent)
    job = JobRun(job_id, info, tmp_path)
    # Both runs say "restart 0 of at most 3": a preemption uses up no restart.
    saved = assert_stopped_and_resumed(job, steps, preempted=True)
    assert len(saved) == 1 and 4 <= saved[0] < steps
    assert slurm_helpers.job_info(urgent)["JobState"] == "COMPLETED"
    metrics = job.metrics()
    assert metrics["sharding"] == "fsdp" and metrics["resumed_from_step"] == saved[0]
    shares = metrics["param_bytes_per_rank"]
    assert [share / (sum(shares) / 6) for share in shares] == pytest.approx([1] * 6, rel=0.2), shares


MEMORY_HOG = """
import os, time
import torch.distributed as dist
dist.init_process_group("gloo")
if dist.get_rank() == 3:
    hog = bytearray(3 * 1024**3)  # over the node's --mem
    for i in range(0, len(hog), 4096):
        hog[i] = 1
dist.barrier()
time.sleep(600)  # never reached by rank 3; the others would wait here without fail-fast
"""


@pytest.mark.timeout(300)
def test_a_rank_over_its_memory_limit_ends_the_job_promptly(cluster, tmp_path):
    """ConstrainRAMSpace: rank 3 (node3) allocates more than --mem; the kernel kills it, Slurm
    names the OOM kill in one line, and the job ends FAILED at once instead of hanging."""
    production(cluster)
    hog = tmp_path / "hog.py"
    hog.write_text(MEMORY_HOG)
    start = time.monotonic()
    job_id = render_and_submit(tmp_path, [*UNEVEN, "--script", str(hog), "--mem", "2G", "--no-preflight"],
                               wait=False)
    try:
        info = slurm_helpers.wait_job(job_id, timeout=240)
    finally:
        slurm_helpers.cancel(job_id)
    elapsed = time.monotonic() - start
    log = job_log(tmp_path, job_id)
    assert info["State"] in ("FAILED", "OUT_OF_MEMORY"), log
    assert elapsed < 150, f"the job took {elapsed:.0f} s to end"
    # Named in one line, with the node: "srun: error: node3: task 0: Out Of Memory".
    assert re.search(r"srun: error: node3: task \d+: Out Of Memory", log), log
    assert re.search(r"Detected \d+ oom.kill event", log), log
    assert "slurmgen: component 1 (2 node(s) x 2 GPUs) failed with exit status" in log, log
    assert info["Restarts"] == "0" and "requeueing" not in log
