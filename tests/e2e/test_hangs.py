"""Hangs and bad nodes (issue 12), end to end on the local cluster with a spare node: GPUs
1,1,2,2,2, so a 1,1,2,2 job fits again once one 2-GPU node is left out.

* two hangs in one job pinned to node1..node4 (--nodelist): rank 3 stopped with SIGSTOP, then (in
  the retried run, at its first step) rank 3 stuck in its data loader while the others wait for it.
  Each is named with its node and stack in hang-report-JOB.txt within --hang-timeout + 60 s; the
  second failure on node3 gets node3 excluded (and out of the job's pins) and the third run
  finishes every step on the spare node;
* node3's slurmd killed mid-run: Slurm marks it down and requeues the job, the next run says so,
  leaves node3 out and finishes from the checkpoint on the spare node;
* a user's Trainer script stuck in its own code on one rank is named, retried, and checkpointed at
  the time-limit warning; a user's plain loop whose rank is killed is retried;
* the submit path: a stopped rank named, then a crash on the same node, which gets it excluded (the
  rendered script's second failure on a node is the two hangs above);
* a healthy run three times as long as its hang timeout raises no false alarm: in
  tests/e2e/test_slow_nodes.py, whose straggler job runs healthy that long first.

The module brings the cluster up as 1,1,2,2,2 (same profile and Slurm) with host names that are
not Slurm's node names (`localcluster.sh up --host-names other`), and back as it was.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.e2e.conftest import CLUSTER, REPO, STATE, JobRun, render_and_submit
from tests.e2e.test_fault_tolerance import (ddp_args, job_log, progress_steps, wait_progress,
                                             wait_with_nudges)

UNEVEN = ["--nodes", "4", "--gpus", "1,1,2,2", "--module", "train.ddp_loop"]
# Twice the 10 s of the healthy part of tests/e2e/test_slow_nodes.py's straggler job (which shows that
# 10 s raises no false alarm on a healthy job): these jobs retry, resume and checkpoint on a CI machine
# whose CPU may be half taken, where a step, a resume or a save can outlast 10 s.
HANG_TIMEOUT = 20


def wait_idle(timeout: float = 120) -> None:
    """Until no job is left on the cluster (an earlier test's may still be completing), so that
    Slurm places the next job on node1..node4 as the tests expect."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not subprocess.run(["squeue", "-h"], capture_output=True, text=True).stdout.strip():
            return
        time.sleep(0.5)


def component_nodes(info: dict) -> list[str]:
    import hostlist
    return [n for c in info["Components"] for n in hostlist.expand_hostlist(c["NodeList"])]


def read_beat(folder: Path, rank: int) -> tuple[int, str, int, bool]:
    """(step, host, pid, saving) from a rank's heartbeat: its line in its node's file (node-NODE,
    published from the node), or its own file (rank-R, the submit path's). A rank inside a
    checkpoint save appends "save SECONDS" to its five fields."""
    texts = [p.read_text() for p in folder.glob("node-*")] + [p.read_text() for p in folder.glob(f"rank-{rank}")]
    for line in "".join(texts).splitlines():
        if line.split()[:1] == [str(rank)]:
            _, step, _, host, pid, *phase = line.split()
            return int(step), host, int(pid), bool(phase)
    raise FileNotFoundError(f"no heartbeat of rank {rank} in {folder}")


def beat_of(workdir: Path, job_id: str, rank: int, timeout: float = 60) -> tuple[int, str, int]:
    """(step, host, pid) from a rank's heartbeat once it is outside a checkpoint save (a rank
    stopped inside one has the save's allowance on top of the hang timeout)."""
    deadline = time.monotonic() + timeout
    while True:
        step, host, pid, saving = read_beat(workdir / "logs" / f".slurmgen-{job_id}" / "beats", rank)
        if not saving or time.monotonic() > deadline:
            return step, host, pid
        time.sleep(0.1)


def reports(workdir: Path, job_id: str) -> list[str]:
    path = workdir / "logs" / f"hang-report-{job_id}.txt"
    text = path.read_text() if path.exists() else ""
    return [r for r in re.split(r"(?m)^(?=slurmgen hang report: )", text) if r.strip()]


def wait_reports(workdir: Path, job_id: str, count: int, timeout: float) -> float:
    deadline = time.monotonic() + timeout
    while len(reports(workdir, job_id)) < count:
        if time.monotonic() > deadline:
            pytest.fail(f"no hang report {count} after {timeout:g} s:\n{job_log(workdir, job_id)[-5000:]}")
        time.sleep(0.5)
    return time.monotonic()


def rank_section(report: str, rank: int) -> str:
    return report.split(f"--- rank {rank} on ", 1)[1].split("\n--- rank", 1)[0]  # the next: rank or ranks


def finished_every_step(workdir: Path, job, steps: int) -> None:
    assert job.state == "COMPLETED", job.log[-6000:]
    assert job.metrics()["global_step"] == steps, job.log[-4000:]
    assert set(range(1, steps + 1)) <= set(progress_steps(workdir / "run")), job.log[-4000:]


def test_hung_ranks_are_named_and_the_job_finishes(spare_node, assets, tmp_path):
    """The job is pinned to node1..node4 (--nodelist): excluding node3 drops it from the pins."""
    steps = 40
    job_id = render_and_submit(
        tmp_path, [*UNEVEN, "--nodelist", "node[1-4]", "--hang-timeout", str(HANG_TIMEOUT), "--collective-timeout",
                   "900", "--env", "SLURMGEN_TEST_STEP_SLEEP=0.4", "--env", "SLURMGEN_TEST_HANG_IN_DATA=3:first:1"],
        ddp_args(assets, tmp_path, steps, save_steps=5), wait=False)
    # Run 0: rank 3 (node3) stopped once checkpoint-10 exists.
    wait_progress(job_id, tmp_path / "run", 12)
    step, host, pid = beat_of(tmp_path, job_id, 3)
    assert host == "node3"
    os.kill(pid, signal.SIGSTOP)
    stopped_at = time.monotonic()
    named_at = wait_reports(tmp_path, job_id, 1, HANG_TIMEOUT + 60)
    assert named_at - stopped_at <= HANG_TIMEOUT + 60
    first = reports(tmp_path, job_id)[0]
    summary = first.split("ranks:")[0]
    assert re.search(r"rank 3 on node3 \(step \d+, stopped by a signal \(SIGSTOP\?\)\) is in ", summary), first
    assert "suspect node: node3" in summary, first
    assert re.search(r'File ".*", line \d+ in ', rank_section(first, 3)), first
    # Run 1: rank 3 hangs in its data loader at its first step; the others wait for it.
    job = JobRun(job_id, wait_with_nudges(job_id, timeout=900), tmp_path)
    log = job_log(tmp_path, job_id)
    resumed = re.findall(r"resuming from \S+ at step (\d+)", log)[0]
    second = reports(tmp_path, job_id)[1]
    summary = second.split("ranks:")[0]
    assert re.search(rf"rank 3 on node3 \(step {resumed}\) is in hang_in_data_loader \(train/heartbeat\.py:\d+\),"
                     r" called from batches \(train/data\.py:\d+\)", summary), second
    assert re.search(rf"ranks 0-2,4-5 on node\[1-4\] \(step {resumed}\) wait in ", summary), second
    assert "slurmgen: hang: no progress for" in log and "slurmgen:   rank 3 on node3" in log, log[-6000:]
    assert "failure 1 of at most 2 (hang on node3): requeueing" in log, log[-6000:]
    assert "failure 2 of at most 2 (hang on node3): requeueing" in log and \
        "excluding node3 (2nd failure there)" in log, log[-6000:]
    # Run 2: without node3, on the spare node, from the newest checkpoint.
    finished_every_step(tmp_path, job, steps)
    assert "node3" not in component_nodes(job.info) and "node5" in component_nodes(job.info), job.info
    assert len(re.findall(r"resuming from \S+checkpoint-\d+ at step \d+", log)) == 2, log[-6000:]


def test_a_lost_node_is_excluded_and_the_job_finishes_on_the_spare(spare_node, assets, tmp_path):
    steps = 40
    job_id = render_and_submit(
        # 1.5 s per step in the first run: it must outlast the kill by more than SlurmdTimeout (30 s)
        # plus Slurm's notice, however fast the steps (the resumed run is not slowed).
        tmp_path, [*UNEVEN, "--env", "SLURMGEN_TEST_STEP_SLEEP=1.5"],
        ddp_args(assets, tmp_path, steps, save_steps=5), wait=False)
    wait_progress(job_id, tmp_path / "run", 6)
    slurmd = int((STATE / "run" / "slurmd-node3.pid").read_text().split()[0])
    os.kill(slurmd, signal.SIGKILL)
    try:
        job = JobRun(job_id, wait_with_nudges(job_id, timeout=900), tmp_path)
    finally:
        subprocess.run(["bash", str(CLUSTER), "node-restart", "node3"], capture_output=True, text=True)
        subprocess.run(["scontrol", "update", "nodename=node3", "state=resume"], capture_output=True)
    log = job_log(tmp_path, job_id)
    # 22.05 requeues the job itself and the next run counts the failure; 25.11 signals the batch
    # script, whose monitor finds node3 down before requeueing
    assert re.search(rf"slurmgen: the last run of job {job_id} ended when node3 became \S*DOWN\S*: failure 1 "
                     r"of at most 2; node3 is left out of later runs", log) or \
        re.search(rf"slurmgen: failure 1 of at most 2 \(node on node3\): requeueing job {job_id} to resume from its"
                  r" newest checkpoint; excluding node3 \(\S*DOWN\S*\)", log), log[-6000:]
    finished_every_step(tmp_path, job, steps)
    assert "node3" not in component_nodes(job.info) and "node5" in component_nodes(job.info), job.info
    assert re.search(r"resuming from \S+checkpoint-\d+ at step [1-9]\d*", log), log[-6000:]


def test_a_node_whose_software_differs_is_excluded_at_once(spare_node, assets, tmp_path):
    """Preflight finds another trl on node3 only: the job is requeued without node3 and trains."""
    fake = tmp_path / "fake-site"
    (fake / "trl-0.0.1.dist-info").mkdir(parents=True)
    (fake / "trl-0.0.1.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: trl\nVersion: 0.0.1\n")
    wrapper = tmp_path / "python-on-node"
    wrapper.write_text(f'#!/bin/bash\n[ "$SLURMD_NODENAME" = node3 ] && export PYTHONPATH={fake}\n'
                       f'exec {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    job_id = render_and_submit(tmp_path, [*UNEVEN, "--python", str(wrapper)], ddp_args(assets, tmp_path, 6),
                               wait=False)
    job = JobRun(job_id, wait_with_nudges(job_id, timeout=600), tmp_path)
    log = job_log(tmp_path, job_id)
    assert re.search(r"node3\s+trl\s+0\.0\.1", log), log[-4000:]
    assert f"slurmgen: failure 1 of at most 2 (preflight on node3): requeueing job {job_id} to resume from its" \
           " newest checkpoint; excluding node3 (preflight)" in log, log[-4000:]
    finished_every_step(tmp_path, job, 6)
    assert "node3" not in component_nodes(job.info) and "node5" in component_nodes(job.info), job.info


def json_load(path: Path):
    import json
    return json.loads(path.read_text())


def test_submit_path_names_a_hung_rank_retries_a_crash_and_excludes_the_node(spare_node, assets, tmp_path):
    """python -m slurmgen.submit watches the heartbeats itself: rank 3 stopped with SIGSTOP is named
    with its node and stack within the timeout + 60 s; the hang counts as a failure, and the retry (a
    new job) resumes from the newest checkpoint. There the first rank on node3 crashes at step 16
    (it does in every job): the second failure on node3 gets node3 excluded (and out of the job's
    pins: it is submitted with --nodelist node[1-4]), and the third job finishes on the spare node."""
    wait_idle()
    from tests.e2e.conftest import OFFLINE

    folder = tmp_path / "submitit"
    cmd = [sys.executable, "-m", "slurmgen.submit", "--folder", str(folder), "--cpus-per-gpu", "1", *OFFLINE,
           "--nodes", "4", "--gpus", "1,1,2,2", "--module", "train.ddp_loop", "--nodelist", "node[1-4]",
           "--hang-timeout", str(HANG_TIMEOUT), "--collective-timeout", "900", "--env", "SLURMGEN_TEST_STEP_SLEEP=0.4",
           "--env", "SLURMGEN_TEST_CRASH_ON=node3:16", "--", *ddp_args(assets, tmp_path, 30, save_steps=5)]
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONPATH=str(REPO)))
    try:
        deadline = time.monotonic() + 300
        while True:  # stopped after checkpoint-5, well before the crash at step 16
            beats = sorted(folder.glob(".slurmgen-*/beats/rank-3"))
            if beats:
                step, host, pid, saving = read_beat(beats[0].parent, 3)
                if step >= 6 and not saving:  # stopped inside a save, its allowance would outlast the timeout
                    break
            assert time.monotonic() < deadline and proc.poll() is None, "rank 3 never reached step 6"
            time.sleep(0.3)
        assert step < 16, step
        os.kill(pid, signal.SIGSTOP)
        stopped_at = time.time()
        out, err = proc.communicate(timeout=900)
    finally:
        if proc.poll() is None:
            proc.kill()
    both = (out + err)[-6000:]
    assert proc.returncode == 0, both
    assert host == "node3"
    report = next(folder.glob("hang-report-*.txt"))
    assert report.stat().st_mtime - stopped_at <= HANG_TIMEOUT + 60
    assert re.search(r"slurmgen:   rank 3 on node3 \(step \d+, stopped by a signal \(SIGSTOP\?\)\) is in ", err), err
    assert re.search(r"--- rank 3 on node3 ---\n(.*\n)*?  File \".*\", line \d+ in ", report.read_text())
    assert re.search(r"^slurmgen: failure 1 of at most 2 \(hang on node3\): submitting again to resume from "
                     r"the newest checkpoint", out, re.M), both
    assert "failure 2 of at most 2 (crash on node3): submitting again to resume from the newest checkpoint;" \
           " excluding node3 (2nd failure there)" in out + err, both
    assert len(re.findall(r"^submitted job \d+", out, re.M)) == 3, both
    assert json_load(tmp_path / "run" / "metrics.json")["global_step"] == 30


# ---- A user's own script, with the rank hooks (issue 26) ----

# The test's pace, in the user's own code: steps slow enough to interrupt in every run; and a bug of
# the user's own: in the job's first run, rank 3 waits at step 3 for something that never comes.
SLOW_STEPS = '''
import os
import time
from transformers import TrainerCallback


def wait_for_the_teacher_model():
    while True:
        time.sleep(3600)


class Slow(TrainerCallback):
    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == 3 and os.environ["RANK"] == "3" and os.environ.get("SLURM_RESTART_COUNT", "0") == "0":
            wait_for_the_teacher_model()
        time.sleep(0.3)


trainer.add_callback(Slow())
trainer.train()
'''

# train.ddp_loop's loop as a user writes it: no slurmgen, no train, no heartbeat calls.
PLAIN_LOOP = '''
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
torch.manual_seed(0)
model = DDP(torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1)))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
for step in range(int(os.environ.get("STEPS", "200"))):
    x = torch.randn(8, 16)
    loss = (model(x) - x.sum(dim=1, keepdim=True)).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    time.sleep(0.3)
dist.destroy_process_group()
'''


def wait_beat(workdir: Path, job_id: str, rank: int, restarts: int, timeout: float = 240) -> tuple[int, str, int]:
    """(step, host, pid) of a live rank of the job's run `restarts` (Slurm's restart count) once
    it has trained a step since it started, outside a checkpoint save."""
    from tests import slurm_helpers

    folder = workdir / "logs" / f".slurmgen-{job_id}" / "beats"
    deadline = time.monotonic() + timeout
    first = None  # (step, pid) of this rank's first beat seen
    nudge = slurm_helpers.RequeueNudger(job_id)  # a requeued het job may need one
    while True:
        info = slurm_helpers.job_info(job_id)
        assert not slurm_helpers.is_finished(info), job_log(workdir, job_id)[-6000:]
        nudge(info)
        assert time.monotonic() < deadline, f"rank {rank} of run {restarts} never beat"
        try:
            step, host, pid, saving = read_beat(folder, rank)
            os.kill(pid, 0)  # a rank of this run: the last run's are gone
        except (OSError, ValueError):
            time.sleep(0.3)
            continue
        if info.get("Restarts") == str(restarts) and not saving:
            first = first if first is not None and first[1] == pid else (step, pid)
            if step > first[0]:
                return step, host, pid
        time.sleep(0.3)


@pytest.mark.timeout(900)
def test_a_users_trainer_script_is_watched_retried_and_checkpointed_at_the_warning(spare_node, assets, tmp_path):
    """Seed 000's own script, its TRL names fixed, on 1,1,2,2 with nothing of slurmgen in it, in one
    job: rank 3 stuck in the user's own code (alive, not stopped) is named with the function it waits
    in, the others with where they wait for it, and the job is retried; the time-limit warning saves
    a checkpoint at the current step and the requeued run resumes from it (--resume auto); every
    step runs and the run finishes."""
    from tests import slurm_helpers
    from tests.test_script_check import adapted_seed_source

    wait_idle()
    steps = 20
    source = adapted_seed_source(assets, tmp_path / "run", f"max_steps={steps}, save_steps=5, logging_steps=1")
    assert source.count("\ntrainer.train()") == 1
    script = tmp_path / "train.py"
    script.write_text(source.replace("\ntrainer.train()", SLOW_STEPS))
    job_id = render_and_submit(tmp_path, ["--nodes", "4", "--gpus", "1,1,2,2", "--script", str(script),
                                          "--resume", "auto", "--hang-timeout", str(HANG_TIMEOUT),
                                          "--collective-timeout", "900", "--env", "TRANSFORMERS_VERBOSITY=info"],
                               wait=False)
    try:
        # Run 0: rank 3 (node3) waits for good in the user's callback at step 3.
        wait_reports(tmp_path, job_id, 1, 300)
        # Run 1: the time-limit warning, by hand.
        wait_beat(tmp_path, job_id, 0, restarts=1)
        subprocess.run(["scancel", "--signal=USR2", "--batch", job_id], check=True)
        job = JobRun(job_id, wait_with_nudges(job_id, timeout=600), tmp_path)
    finally:
        slurm_helpers.cancel(job_id)
    log = job.log
    report = reports(tmp_path, job_id)[0]
    summary = report.split("ranks:")[0]
    assert re.search(r"rank 3 on node3 \(step 3\) is in wait_for_the_teacher_model \(\S*train\.py:\d+\), called from"
                     r" on_step_end \(\S*train\.py:\d+\)", summary), report
    assert re.search(r"ranks 0-2,4-5 on node\[1-4\] \(step [34]\) wait in ", summary), report
    assert "suspect node: node3" in summary, report
    assert job.state == "COMPLETED", log[-6000:]
    assert "failure 1 of at most 2 (hang on node3): requeueing" in log, log[-6000:]
    # The warning's checkpoint, in the run that had the warning (the ranks stopped after the hang may
    # have saved one too, at SIGTERM). Rank 0's line and the runtime's come from two processes: rank
    # 0 may see the stop file and save before the runtime's next look says so.
    runs = re.split(r"(?m)^slurmgen: job \d+ \(restart ", log)
    warned = next(i for i, run in enumerate(runs) if "slurmgen: time limit or preemption warning" in run)
    saved = re.findall(r"stop requested, saved checkpoint at step (\d+)", runs[warned])[-1]
    assert (tmp_path / "run" / f"checkpoint-{saved}" / "slurmgen_complete").is_file()
    assert re.findall(r"resuming from \S+/checkpoint-(\d+)", "".join(runs[warned + 1:])) == [saved], log[-6000:]
    assert set(range(1, steps + 1)) <= set(progress_steps(tmp_path / "run")), log[-4000:]
    assert "Total train batch size (w. parallel, distributed & accumulation) = 12" in log


@pytest.mark.timeout(780)
def test_a_plain_loop_is_retried_when_a_rank_is_killed_after_training_began(spare_node, tmp_path):
    """A DDP loop that knows nothing of slurmgen: the rank hooks beat at its optimizer steps, so a
    rank killed after training began counts as a failure that is retried (without beats it would end
    the job: "no rank had begun training"); the second run finishes. (A plain script's stopped rank,
    named with its stack: tests/e2e/test_spares.py.)"""
    from tests import slurm_helpers

    wait_idle()
    script = tmp_path / "loop.py"
    script.write_text(PLAIN_LOOP)
    job_id = render_and_submit(tmp_path, ["--nodes", "4", "--gpus", "1,1,2,2", "--script", str(script),
                                          "--hang-timeout", str(HANG_TIMEOUT), "--env", "STEPS=40"], wait=False)
    try:
        # Run 0: rank 4 (node4) is killed once it trains.
        _, host, pid = wait_beat(tmp_path, job_id, 4, restarts=0)
        assert host == "node4"
        os.kill(pid, signal.SIGKILL)
        info = wait_with_nudges(job_id, timeout=600)
    finally:
        slurm_helpers.cancel(job_id)
    log = job_log(tmp_path, job_id)
    assert "failure 1 of at most 2 (crash on node4): requeueing" in log, log[-4000:]
    assert info["State"] == "COMPLETED" and info["Restarts"] == "1", log[-4000:]
    assert reports(tmp_path, job_id) == [], log[-4000:]  # a crash, not a hang
