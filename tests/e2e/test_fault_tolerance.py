"""Fault tolerance on the real four-node cluster (GPUs 1,1,2,2): issue 6, end to end.

Each test runs real jobs rendered by `slurmgen render`, with real srun and torchrun:

* time limit: `--time 2 --grace 60`; Slurm's own warning (USR2 to the batch shell) makes every
  rank checkpoint, the script requeues the job, the next run (given 15 minutes by the test) resumes
  at exactly that step and finishes (train.sft; steps have a floor, SLURMGEN_TEST_STEP_SLEEP, so the first run cannot
  finish before the warning however idle the machine is);
* preemption: tests/e2e/test_production.py's urgent job preempts a sharded (FSDP) train.ddp_loop run;
* the warning with no restarts left (`--max-restarts 0`): a checkpoint, no requeue, FAILED;
* a rank killed with SIGKILL mid-run: the job ends FAILED within 60 s, not requeued, the log
  names the failing component and node, and no rank of the job is left running;
* a kill during checkpoint saving: rank 0 is SIGKILLed the moment it starts writing the second
  checkpoint (inotify); the rerun sets the half-written one aside (and a planted newer, corrupt
  one) and resumes from the previous complete checkpoint (train.sft: HF writes in place);
* ports: two jobs sharing both their nodes at once, each on the port derived from its job id (and
  not an exported MASTER_PORT), are asserted in tests/e2e/test_benign.py's first job.

A requeued job is held ~120 s (EligibleTime) and, on an idle cluster, waits for the backfill
scheduler to look again: the tests nudge it (`slurm_helpers.nudge`) once it is PENDING with
Restarts >= 1 and its requeue is slurm_helpers.NUDGE_AFTER seconds old. The generated script does not depend
on the nudge. Runs each test once; the whole file takes about 6 to 7 minutes.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from tests import slurm_helpers
from tests.dir_events import DirEvents
from tests.e2e.conftest import (REFERENCE_ARGS, REFERENCE_STEPS, JobRun, assert_exact_resume, assert_same_weights,
                                render_and_submit, sft_args)

UNEVEN = ["--nodes", "4", "--gpus", "1,1,2,2"]
LAYOUT = {"node1": 1, "node2": 1, "node3": 2, "node4": 2}
TAG_ENV = "SLURMGEN_TEST_TAG"


# ---------------------------------------------------------------------------- helpers
def ddp_args(assets, workdir: Path, steps: int, save_steps: int | None = None):
    return ["--model_name_or_path", str(assets / "lm"), "--dataset", str(assets / "data" / "text.jsonl"),
            "--output_dir", str(workdir / "run"), "--max_steps", str(steps),
            "--save_steps", str(save_steps or steps), "--batch_size", "4", "--lr", "3e-3"]


def tagged(args):
    """Render options plus a unique environment tag that finds this job's processes in /proc."""
    tag = uuid.uuid4().hex
    return [*args, "--env", f"{TAG_ENV}={tag}"], tag


def job_log(workdir: Path, job_id: str) -> str:
    return "".join(p.read_text(errors="replace") for p in sorted((workdir / "logs").glob(f"*-{job_id}.out")))


def progress_steps(run_dir: Path) -> list[int]:
    path = run_dir / "progress.jsonl"
    if not path.exists():
        return []
    steps = []
    for line in path.read_text().splitlines():
        if line.strip():
            steps.append(json.loads(line)["step"])
    return steps


def progress_times(run_dir: Path) -> tuple[float, float]:
    times = [json.loads(l)["time"] for l in (run_dir / "progress.jsonl").read_text().splitlines() if l.strip()]
    return min(times), max(times)


def wait_progress(job_id: str, run_dir: Path, steps: int, timeout: float = 180) -> None:
    """Until rank 0 has logged at least ``steps`` steps; fails at once if the job ends first."""
    deadline = time.monotonic() + timeout
    while len(progress_steps(run_dir)) < steps:
        info = slurm_helpers.job_info(job_id)
        if slurm_helpers.is_finished(info):
            pytest.fail(f"job {job_id} ended ({info['JobState']}) before step {steps}:\n"
                        f"{job_log(run_dir.parent, job_id)[-4000:]}")
        if time.monotonic() > deadline:
            pytest.fail(f"job {job_id}: fewer than {steps} steps after {timeout:g} s")
        time.sleep(0.3)


def wait_with_nudges(job_id: str, timeout: float, until=None) -> dict:
    """wait_job, but nudge the job whenever it is PENDING after a requeue (Restarts >= 1); until: a
    test of the job's record that ends the wait as soon as it holds, with that record."""
    deadline = time.monotonic() + timeout
    nudge = slurm_helpers.RequeueNudger(job_id)
    while True:
        try:
            info = slurm_helpers.job_info(job_id)
        except (LookupError, subprocess.TimeoutExpired):
            info = None
        if info is not None:
            if until is not None and until(info):
                return info
            if slurm_helpers.is_finished(info):
                return slurm_helpers.wait_job(job_id, timeout=10)
            nudge(info)
        if time.monotonic() > deadline:
            slurm_helpers.cancel(job_id)
            raise TimeoutError(f"job {job_id} not finished after {timeout:g} s:\n"
                               f"{slurm_helpers.show_job_text(job_id)}")
        time.sleep(0.5)


def tagged_workers(tag: str) -> dict[int, dict[str, str]]:
    """Training processes (not torchrun agents) of the job with ``tag``: pid -> environment.

    All nodes of the local cluster share one PID namespace, so /proc shows every rank."""
    found = {}
    needle = f"{TAG_ENV}={tag}".encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                argv = fh.read().split(b"\0")
            with open(f"/proc/{entry}/environ", "rb") as fh:
                env = fh.read().split(b"\0")
        except OSError:
            continue
        # python [-u] -m train.X: not torchrun, srun or bash, whose command lines hold it too
        if needle not in env or b"-m" not in argv[1:3] or b"python" not in os.path.basename(argv[0]):
            continue
        if not argv[argv.index(b"-m") + 1].startswith(b"train."):
            continue
        found[int(entry)] = dict(kv.decode(errors="replace").split("=", 1) for kv in env if b"=" in kv)
    return found


def worker_with_rank(tag: str, rank: int, timeout: float = 30) -> tuple[int, dict[str, str]]:
    deadline = time.monotonic() + timeout
    while True:
        for pid, env in tagged_workers(tag).items():
            if env.get("RANK") == str(rank):
                return pid, env
        if time.monotonic() > deadline:
            pytest.fail(f"no training process with RANK={rank} for tag {tag}")
        time.sleep(0.2)


def assert_stopped_and_resumed(job: JobRun, steps: int, max_restarts: int = 3, preempted: bool = False) -> list[int]:
    """The contract of a job stopped by the warning: checkpoint at the stop step, requeue with
    the restart count in the log (a preemption: not counted), resume from exactly that step,
    finish every step once. Returns the steps at which the runs stopped."""
    assert job.state == "COMPLETED", job.log
    assert job.info["ExitCode"] == "0:0", job.log
    log = job.log
    # Slurm 25.11 requeues a preempted het job once more after it finished: that extra run
    # ends at once, saying so, and counts as no stop.
    extra = log.count("slurmgen: finished in an earlier run")
    assert extra <= (1 if preempted else 0), log
    restarts = int(job.info["Restarts"]) - extra
    assert restarts >= 1, f"never requeued:\n{log}"
    for r in range(restarts + 1):
        used = 0 if preempted else r
        assert f"slurmgen: job {job.job_id} (restart {used} of at most {max_restarts})" in log, log
    # Every warning ends in a checkpoint and a requeue, except one that lands after the last
    # run's last stop check: that run finishes every step and says so instead.
    late = log.count("before the warning could stop it; not requeueing")
    assert late <= 1 and log.count("time limit or preemption warning: asking every rank to checkpoint") == restarts + late, log
    if preempted:  # Slurm requeues a preempted job itself
        requeues = [(s, "") for s in re.findall(rf"checkpoint saved at step (\d+); job {job.job_id} preempted: Slurm requeues it", log)]
    else:
        requeues = re.findall(rf"checkpoint saved at step (\d+); requeueing job {job.job_id} \(restart (\d+) of at most {max_restarts}\)", log)
        assert [int(r) for _, r in requeues] == list(range(1, restarts + 1)), log
    assert len(requeues) == restarts, log
    saved = [int(s) for s in re.findall(r"stop requested, saved checkpoint at step (\d+)", log)]
    assert saved == [int(s) for s, _ in requeues], log
    resumed = [(Path(p), int(s)) for p, s in re.findall(r"resuming from (\S+) at step (\d+)", log)]
    # Each run resumes from the very checkpoint the previous run saved at the warning.
    assert [s for _, s in resumed] == saved, log
    assert [p.name for p, _ in resumed] == [f"checkpoint-{s}" for s in saved], log
    for path, step in resumed:
        assert (path / "slurmgen_complete").is_file()
    assert 0 < saved[0] and saved == sorted(set(saved)) and saved[-1] < steps, saved
    metrics = job.metrics()
    assert metrics["global_step"] == steps
    assert metrics["resumed_from_step"] == saved[-1]
    assert metrics["stopped_early"] is False
    assert metrics["world_size"] == 6 and metrics["ranks_per_host"] == LAYOUT
    # Every step trained exactly once over all runs: nothing repeated after a resume (the stop
    # checkpoint is taken at the warning, so not even a checkpoint interval is lost).
    assert progress_steps(job.workdir / "run") == list(range(1, steps + 1))
    assert "Traceback" not in log, log
    return saved


# ----------------------------------------------------------------------------- tests
# Slurm checks time limits every 30 s (PERIODIC_TIMEOUT) and sends the warning once the limit is
# less than GRACE + 30 s away (send_job_warn_signal): here 30 to 60 s after the start. train.sft
# reaches its first step at least 15 s after the start, so the first run trains at most 45 s; its
# steps pause 3 s each (first run only), so 30 steps take over 90 s: it cannot finish, whatever the
# machine's load, and stops at about step 1 to 12 (a warning before its first step stops it after
# that step). The resumed run has no pause and ends mostly before its own warning. A warning that
# still lands after its last stop check (a slow machine) must not requeue the finished run; a third
# run, if steps are slower still, is checked the same way. (A 2-minute limit: the shortest that
# leaves the first run time to start before the warning.) Once the job is requeued the test gives it
# 15 minutes (scontrol update TimeLimit): on a loaded CI machine six ranks took 70 to 120 s to start,
# each run made a step or a few before its own warning, and the job used its restarts up (with
# `--time 3` too). The first warning is Slurm's own either way.
TIME_LIMIT = ["--time", "2", "--grace", "60", "--env", "SLURMGEN_TEST_STEP_SLEEP=3"]
TIME_LIMIT_STEPS = REFERENCE_STEPS  # the reference run's arguments, so its losses compare


@pytest.mark.core
@pytest.mark.timeout(960)
def test_time_limit_checkpoints_requeues_and_resumes(sft_reference, assets, tmp_path):
    """Slurm's own time-limit warning: train.sft on 1,1,2,2 checkpoints at the warning, the
    script requeues the job, the next run resumes at that step and finishes every step; every
    loss and weight is the uninterrupted run's (sft_reference's), bit for bit."""
    start = time.monotonic()
    job_id = render_and_submit(tmp_path, [*UNEVEN, *TIME_LIMIT],
                               sft_args(assets, tmp_path, steps=TIME_LIMIT_STEPS, **REFERENCE_ARGS), wait=False)
    # Slurm holds a requeued job about 120 s: the record is read before anything nudges it
    requeued = wait_with_nudges(job_id, timeout=600, until=lambda info: int(info.get("Restarts") or 0) >= 1)
    assert requeued["Restarts"] == "1", requeued  # the first run's warning, before any more time
    done = subprocess.run(["scontrol", "update", f"jobid={job_id}", "TimeLimit=15"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert {c["TimeLimit"] for c in slurm_helpers.job_info(job_id)["components"]} == {"00:15:00"}
    info = wait_with_nudges(job_id, timeout=900)
    job = JobRun(job_id, info, tmp_path)
    saved = assert_stopped_and_resumed(job, TIME_LIMIT_STEPS)
    assert "TIMEOUT" not in job.log and "DUE TO TIME LIMIT" not in job.log
    assert_exact_resume(sft_reference, tmp_path / "run", job.log)
    assert_same_weights(sft_reference, tmp_path / "run", TIME_LIMIT_STEPS)
    print(f"time limit: job {job_id} stopped at steps {saved}, restarts {info['Restarts']}, "
          f"{time.monotonic() - start:.0f} s")


@pytest.mark.timeout(300)
def test_warning_with_no_restarts_left_checkpoints_and_fails(cluster, assets, tmp_path):
    """--max-restarts 0: the warning still saves a complete checkpoint, but the job is not
    requeued and ends FAILED, so unfinished training never looks like success."""
    job_id = render_and_submit(tmp_path, [*UNEVEN, "--module", "train.ddp_loop", "--max-restarts", "0"],
                               ddp_args(assets, tmp_path, 5000), wait=False)
    try:
        wait_progress(job_id, tmp_path / "run", 3)
        subprocess.run(["scancel", "--signal=USR2", "--batch", job_id], check=True)
        info = slurm_helpers.wait_job(job_id, timeout=120)
    finally:
        slurm_helpers.cancel(job_id)
    log = job_log(tmp_path, job_id)
    assert info["State"] == "FAILED" and info["ExitCode"] == "1:0", log
    assert info["Restarts"] == "0" and "requeueing job" not in log, log
    assert "training unfinished; not requeueing: 0 restart(s) used" in log, log
    saved = [int(s) for s in re.findall(r"stop requested, saved checkpoint at step (\d+)", log)]
    assert len(saved) == 1 and 3 <= saved[0] < 5000, log
    assert (tmp_path / "run" / f"checkpoint-{saved[0]}" / "slurmgen_complete").is_file()
    assert not (tmp_path / "run" / "metrics.json").exists() or json.loads(
        (tmp_path / "run" / "metrics.json").read_text())["stopped_early"] is True


@pytest.mark.timeout(300)
def test_killed_rank_fails_the_job_within_a_minute(cluster, assets, tmp_path):
    """SIGKILL to global rank 3 (node3) mid-run, with no retries (--max-failures 0; retries are
    tests/e2e/test_hangs.py's): FAILED within 60 s, not requeued, the log names the failing
    component and node, and no rank of the job survives."""
    args, tag = tagged([*UNEVEN, "--module", "train.ddp_loop", "--max-failures", "0"])
    job_id = render_and_submit(tmp_path, args, ddp_args(assets, tmp_path, 5000), wait=False)
    try:
        wait_progress(job_id, tmp_path / "run", 3)
        pid, env = worker_with_rank(tag, 3)
        node = env["SLURMD_NODENAME"]
        assert len(tagged_workers(tag)) == 6
        os.kill(pid, signal.SIGKILL)
        killed = time.monotonic()
        info = slurm_helpers.wait_job(job_id, timeout=120, poll=0.25)
        elapsed = time.monotonic() - killed
    finally:
        slurm_helpers.cancel(job_id)
    log = job_log(tmp_path, job_id)
    assert info["State"] == "FAILED", log
    assert info["ExitCode"] != "0:0"
    assert elapsed < 60, f"job ended {elapsed:.0f} s after the kill"
    assert info["Restarts"] == "0", "a failed job must not be requeued"
    assert "requeueing" not in log
    assert f"slurmgen: failure 1 (crash on {node}): no retry left (--max-failures 0)" in log, log
    # slurmgen names the component; srun and torchrun name the node and the rank.
    assert "slurmgen: component 1 (2 node(s) x 2 GPUs) failed with exit status" in log, log
    assert re.search(rf"srun: error: {node}: task \d+: Exited with exit code [1-9]", log), log
    assert re.search(rf"host\s*: {node}\s+rank\s*: 3 ", log), log
    # Nothing of the job keeps running (the other five ranks were stopped, not orphaned).
    deadline = time.monotonic() + 15
    while tagged_workers(tag) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not tagged_workers(tag)
    print(f"killed rank 3 on {node}: job {job_id} FAILED {elapsed:.1f} s later")


@pytest.mark.timeout(400)
def test_kill_during_checkpoint_save_resumes_from_previous(sft_reference, assets, tmp_path):
    """train.sft (HF writes checkpoint-N in place): rank 0 is SIGKILLed once it has written
    checkpoint-8's model, while it pauses in that save (SLURMGEN_TEST_SAVE_SLEEP, before the
    checkpoint is marked complete), so it is left half written. A planted newer, corrupt
    checkpoint-10 joins it. The rerun sets both aside and resumes from checkpoint-4, the newest
    complete one. (No automatic retry, --max-failures 0: the rerun is submitted by the test, after
    the planting.)"""
    steps, every = 12, 4
    run = tmp_path / "run"
    run.mkdir()
    watch = DirEvents(run)
    args, tag = tagged([*UNEVEN, "--max-failures", "0"])
    train_args = sft_args(assets, tmp_path, steps=steps, **{**REFERENCE_ARGS, "save_steps": every})
    job_id = render_and_submit(tmp_path, [*args, "--env", f"SLURMGEN_TEST_SAVE_SLEEP={2 * every}:120"], train_args,
                               wait=False)
    half = run / f"checkpoint-{2 * every}"
    try:
        wait_progress(job_id, run, 1)
        rank0, _ = worker_with_rank(tag, 0)
        # The directory appears first (any rank may create it); kill rank 0 once it has begun
        # writing the model, the first of the files it writes.
        assert watch.wait_for(half.name, timeout=180), f"{half.name} never appeared"
        watch.add(half)
        if not (half / "model.safetensors").exists():
            assert watch.wait_for("model.safetensors", timeout=60), "rank 0 never wrote the model"
        os.kill(rank0, signal.SIGKILL)
        info = slurm_helpers.wait_job(job_id, timeout=120)
    finally:
        watch.close()
        slurm_helpers.cancel(job_id)
    first_log = job_log(tmp_path, job_id)
    assert info["State"] == "FAILED", first_log
    assert info["Restarts"] == "0"
    complete = sorted(p.name for p in (run / "checkpoint-4").iterdir())
    assert "slurmgen_complete" in complete
    written = sorted(p.name for p in half.iterdir())
    # Half written: the model is there, the marker and some of the rest are not.
    assert "model.safetensors" in written and "slurmgen_complete" not in written, written
    assert set(written) < set(complete), (written, complete)
    # A newer directory that looks like a checkpoint but is garbage: resume must not touch it.
    planted = run / "checkpoint-10"
    planted.mkdir()
    (planted / "trainer_state.json").write_text('{"global_step": 10, "log_hist')
    (planted / "model.safetensors").write_bytes(b"\0" * 100)
    progress_before = progress_steps(run)

    rerun = render_and_submit(tmp_path, args, train_args, timeout=300)
    log = job_log(tmp_path, rerun.job_id)
    assert rerun.state == "COMPLETED", log
    assert f"incomplete checkpoint set aside: {run / 'incomplete-checkpoint-8'}" in log, log
    assert f"incomplete checkpoint set aside: {run / 'incomplete-checkpoint-10'}" in log, log
    assert f"resuming from {run / 'checkpoint-4'} at step 4" in log, log
    assert "Traceback" not in log, log
    metrics = rerun.metrics()
    assert metrics["resumed_from_step"] == 4 and metrics["global_step"] == steps
    assert sorted(p.name for p in run.glob("checkpoint-*")) == ["checkpoint-12", "checkpoint-4", "checkpoint-8"]
    assert all((run / f"checkpoint-{s}" / "slurmgen_complete").is_file() for s in (4, 8, 12))
    # Steps 5..8 ran twice (once before the kill, once after the resume): never more than one
    # checkpoint interval; the rerun logged exactly steps 5..12.
    assert progress_before[:4] == [1, 2, 3, 4] and max(progress_before) <= 2 * every
    assert progress_steps(run)[len(progress_before):] == list(range(every + 1, steps + 1))
    # Steps 5..8, logged before the kill and again after the resume, are the uninterrupted run's.
    assert_exact_resume(sft_reference, run, log)
