"""The benign-event matrix (issue 41): on the production-profile cluster, the events a real site
produces every day, through a user's plain script and slurmgen's entry points, and what the job's
fault tolerance must do about them: nothing. No requeue, no failure counted, no node excluded, no
hang report; every step runs once. And the user's own decisions stand: scancel ends a job for good,
whatever its ranks do, in both paths. (The malign twins: tests/e2e/test_hangs.py, test_spares.py,
test_fault_tolerance.py, test_production.py. Two components on one node, which this cluster cannot
place, and mixed GPU types: tests/test_node_beats.py and tests/test_slow_nodes.py with real processes.)
"""
from __future__ import annotations

import json
from datetime import datetime
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import slurm_helpers
from tests.e2e.conftest import OFFLINE, REPO, JobRun, render_and_submit
from tests.e2e.test_fault_tolerance import ddp_args, job_log, wait_with_nudges
from tests.e2e.test_hangs import reports, wait_beat
from tests.e2e.test_isolation import production

HANG_TIMEOUT = 10

# A user's own DDP loop that knows nothing of slurmgen: it installs its own USR1 handler (Lightning's
# requeue, many codebases' own), evaluates for twice the hang timeout with forward passes only, saves
# with torch.save, and writes the steps it ran (rank 0) so that "every step once" can be checked.
PLAIN = '''
import os, signal, sys, time
import torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

signal.signal(signal.SIGUSR1, lambda *_: print("the user's USR1 handler ran", flush=True))
dist.init_process_group("gloo")
rank, out = dist.get_rank(), sys.argv[1]
torch.manual_seed(0)
model = DDP(torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1)))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for step in range(1, int(os.environ.get("STEPS", "30")) + 1):
    x = torch.randn(8, 16)
    loss = (model(x) - x.sum(dim=1, keepdim=True)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if rank == 0:
        with open(os.path.join(out, "steps"), "a") as f:
            f.write(f"{step}\\n")
    if step == 10:  # an evaluation of twice the hang timeout: forward passes, no optimizer step
        with torch.no_grad():
            for _ in range(int(2.5 * float(os.environ["HANG_TIMEOUT"]) / 0.25)):
                model(torch.randn(8, 16))
                time.sleep(0.25)
        torch.save(model.state_dict(), os.path.join(out, f"model-{rank}.pt"))
    time.sleep(0.3)
dist.destroy_process_group()
'''


def plant_another_jobs_folder(workdir: Path, job_id: str) -> None:
    """What another job of the same id left (two clusters sharing a log folder, a reset counter):
    its outcome says it finished, its record a finished run."""
    folder = workdir / "logs" / f".slurmgen-{job_id}"
    folder.mkdir(parents=True)
    (folder / "outcome").write_text("finished 30\n")
    (folder / "state.json").write_text(json.dumps({"runs": [{"started": 1.0, "ended": 2.0, "state": "finished"}],
                                                   "failures": [{"why": "crash", "node": "node3"}]}))


def no_intervention(job: JobRun, workdir: Path) -> dict:
    """COMPLETED in one run: nothing requeued, counted, excluded or reported."""
    log = job.log
    assert job.state == "COMPLETED" and job.info["Restarts"] == "0", log[-6000:]
    for word in ("requeue", "failure", "excluding", "hang:", "straggler", "retry"):
        assert word not in log.lower(), (word, log[-6000:])
    assert reports(workdir, job.job_id) == []
    record = json.loads((workdir / "logs" / f".slurmgen-{job.job_id}" / "state.json").read_text())
    assert record["failures"] == [] and record["excluded"] == [] and record["restarts"] == 0, record
    return record


@pytest.mark.core
@pytest.mark.timeout(600)
def test_two_jobs_on_shared_nodes_through_a_drain_an_evaluation_an_exported_port_and_an_old_job_id(cluster, tmp_path):
    """Two plain-script jobs at once on node3 and node4 (one GPU each there), submitted from a shell that
    exports MASTER_PORT=29500; each job's folder already holds another job's "finished" outcome; node4 is
    drained "for a reboot" while they run; each evaluates for twice the hang timeout and saves with
    torch.save; each installs its own USR1 handler. Both train every step, with no intervention."""
    production(cluster)
    jobs = []
    for name in ("a", "b"):
        workdir = tmp_path / name
        (workdir / "out").mkdir(parents=True)
        (workdir / "loop.py").write_text(PLAIN)
        args = ["--nodes", "2", "--gpus", "1,1", "--nodelist", "node3,node4", "--script", str(workdir / "loop.py"),
                "--hang-timeout", str(HANG_TIMEOUT), "--env", f"HANG_TIMEOUT={HANG_TIMEOUT}", "--job-name", name]
        job_id = render_and_submit(workdir, args, [str(workdir / "out")], wait=False,
                                   env={**os.environ, "MASTER_PORT": "29500"}, hold=True)  # a user's shell
        plant_another_jobs_folder(workdir, job_id)
        jobs.append((job_id, workdir))
    for job_id, _ in jobs:
        slurm_helpers.release(job_id)
    try:
        for job_id, workdir in jobs:
            wait_beat(workdir, job_id, 1, restarts=0)
        slurm_helpers.drain_now("node4", "reboot for a kernel update")  # running jobs there run to their end
        done = [JobRun(job_id, slurm_helpers.wait_job(job_id, timeout=400), workdir) for job_id, workdir in jobs]
    finally:
        slurm_helpers.resume_node("node4")
    ports = set()
    for job in done:
        no_intervention(job, job.workdir)
        assert job.info["NodeList"] == "node[3-4]"
        assert (job.workdir / "out" / "steps").read_text().split() == [str(s) for s in range(1, 31)]
        assert "the user's USR1 handler ran" not in job.log  # the hang watch asks with its own signal
        ports |= set(re.findall(r"master node3:(\d+)", job.log))
        assert f"master node3:{20000 + int(job.job_id) % 10000}" in job.log  # the job's own port
        assert list(job.workdir.glob("logs/.slurmgen-*.before-*")), "the other job's folder was set aside"
    assert len(ports) == 2 and "29500" not in ports, ports
    # Both ran at the same time on the same nodes (each evaluates for 25 s): the ports kept them apart.
    starts, ends = ([datetime.fromisoformat(job.info[key]) for job in done] for key in ("StartTime", "EndTime"))
    assert max(starts) < min(ends), (starts, ends)


BUSY_AT_THE_WARNING = '''
import hashlib, os
from transformers import TrainerCallback


class Slow(TrainerCallback):
    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == 4 and os.environ["RANK"] == "1" and os.environ.get("SLURM_RESTART_COUNT", "0") == "0":
            print("rank 1 busy in C", flush=True)
            hashlib.pbkdf2_hmac("sha256", b"x", b"y", 60_000_000)  # a C call of about 20 s: no Python handler runs in it
        import time
        time.sleep(0.5)


trainer.add_callback(Slow())
trainer.train()
'''


@pytest.mark.timeout(600)
def test_the_warning_reaches_a_rank_busy_in_c_and_a_node_drained_for_a_reboot_and_it_checkpoints(cluster, assets,
                                                                                                 tmp_path):
    """The time-limit warning (Slurm's USR2 to the batch shell) comes while rank 1 of a user's Trainer script is
    in a 20 s C call and node3 is drained for a reboot: every rank checkpoints (the busy one once its call
    returns), the job is requeued, waits for the reboot and resumes; no failure counted, no node excluded."""
    from tests.test_script_check import adapted_seed_source

    production(cluster)
    source = adapted_seed_source(assets, tmp_path / "run", "max_steps=12, save_steps=100, logging_steps=1")
    (tmp_path / "train.py").write_text(source.replace("\ntrainer.train()", BUSY_AT_THE_WARNING))
    job_id = render_and_submit(tmp_path, ["--nodes", "4", "--gpus", "1,1,2,2", "--script", str(tmp_path / "train.py"),
                                          "--resume", "auto", "--hang-timeout", "60"], wait=False)
    try:
        deadline = time.monotonic() + 240
        while "rank 1 busy in C" not in job_log(tmp_path, job_id):
            assert time.monotonic() < deadline, job_log(tmp_path, job_id)[-4000:]
            time.sleep(0.3)
        slurm_helpers.drain_now("node3", "reboot for a kernel update")
        subprocess.run(["scancel", "--signal=USR2", "--batch", job_id], check=True)  # as --signal=B:USR2@GRACE does
        deadline = time.monotonic() + 240
        while slurm_helpers.job_info(job_id)["Restarts"] == "0":  # requeued: it waits for node3's reboot
            assert time.monotonic() < deadline, job_log(tmp_path, job_id)[-4000:]
            time.sleep(0.5)
        slurm_helpers.resume_node("node3")  # rebooted
        info = wait_with_nudges(job_id, timeout=300)
    finally:
        slurm_helpers.resume_node("node3")
        slurm_helpers.cancel(job_id)
    log = job_log(tmp_path, job_id)
    assert info["State"] == "COMPLETED" and info["Restarts"] == "1", log[-6000:]
    saved = re.findall(r"stop requested, saved checkpoint at step (\d+)", log)
    assert saved and f"resuming from {tmp_path}/run/checkpoint-{saved[0]}" in log, log[-6000:]
    record = json.loads((tmp_path / "logs" / f".slurmgen-{job_id}" / "state.json").read_text())
    assert record["failures"] == [] and record["excluded"] == [], record


@pytest.mark.core
@pytest.mark.timeout(600)
def test_scancel_ends_an_entry_point_a_trainer_script_and_a_plain_script_for_good(cluster, assets, tmp_path):
    """Three jobs at once (train.ddp_loop on node1, a user's Trainer script on node2, a plain loop on node3),
    each cancelled once it trains: each ends CANCELLED and stays so; nothing is requeued, though the
    Trainer stops cleanly at the stop file the TERM makes."""
    from tests.test_script_check import adapted_seed_source

    production(cluster)
    plain, trainer = tmp_path / "loop.py", tmp_path / "train.py"
    plain.write_text(PLAIN)
    trainer.write_text(adapted_seed_source(assets, tmp_path / "t" / "run", "max_steps=500, logging_steps=1"))
    (tmp_path / "p" / "out").mkdir(parents=True)
    kinds = {"d": (["--module", "train.ddp_loop", "--nodelist", "node1"], ddp_args(assets, tmp_path / "d", 500)),
             "t": (["--script", str(trainer), "--nodelist", "node2"], []),
             # trains until cancelled (its 30 steps ended first on a loaded machine, before the test got to it)
             "p": (["--script", str(plain), "--nodelist", "node3", "--env", f"HANG_TIMEOUT={HANG_TIMEOUT}",
                    "--env", "STEPS=100000"],
                   [str(tmp_path / "p" / "out")])}
    ids = {}
    for kind, (args, train_args) in kinds.items():
        (tmp_path / kind).mkdir(exist_ok=True)
        ids[kind] = render_and_submit(tmp_path / kind, ["--nodes", "1", "--gpus", "1", *args], train_args, wait=False)
    try:
        for kind, job_id in ids.items():
            wait_beat(tmp_path / kind, job_id, 0, restarts=0)
            subprocess.run(["scancel", job_id], check=True)
        infos = {kind: slurm_helpers.wait_job(job_id, timeout=120) for kind, job_id in ids.items()}
        time.sleep(5)  # a requeue would show by now (the runtime's requeue comes within seconds of the stop)
        again = {kind: slurm_helpers.job_info(job_id) for kind, job_id in ids.items()}
    finally:
        for job_id in ids.values():
            slurm_helpers.cancel(job_id)
    for kind, job_id in ids.items():
        log = job_log(tmp_path / kind, job_id)
        assert infos[kind]["State"] == "CANCELLED" and again[kind]["JobState"] == "CANCELLED", (kind, log[-4000:])
        assert again[kind]["Restarts"] == "0" and "requeueing job" not in log, (kind, log[-4000:])
        assert f"slurmgen: job {job_id} was cancelled (scancel): ending it, not requeueing it" in log, (kind, log[-4000:])


@pytest.mark.timeout(400)
def test_scancel_ends_a_submitted_job_for_good(cluster, assets, tmp_path):
    """python -m slurmgen.submit: a job cancelled while it trains is neither requeued by its tasks nor
    submitted again by the command, which ends with the cancel."""
    folder = tmp_path / "submitit"
    cmd = [sys.executable, "-m", "slurmgen.submit", "--folder", str(folder), "--cpus-per-gpu", "1", *OFFLINE,
           "--nodes", "1", "--gpus", "1", "--module", "train.ddp_loop", "--", *ddp_args(assets, tmp_path, 500)]
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONPATH=str(REPO)))
    try:
        wait_progress_file = tmp_path / "run" / "progress.jsonl"
        deadline = time.monotonic() + 240
        while not (wait_progress_file.exists() and wait_progress_file.read_text().count("\n") >= 3):
            assert time.monotonic() < deadline and proc.poll() is None, "no training step"
            time.sleep(0.3)
        [job_id] = re.findall(r"\d+", subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True,
                                                      text=True).stdout)
        subprocess.run(["scancel", job_id], check=True)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert len(re.findall(r"^submitted job \d+", out, re.M)) == 1, out + err
    assert f"slurmgen: job {job_id} was cancelled (scancel): not submitting it again" in err, out + err
    time.sleep(5)
    info = slurm_helpers.job_info(job_id)
    assert info["JobState"] == "CANCELLED" and info["Restarts"] == "0", info



@pytest.mark.timeout(400)
def test_a_term_to_the_steps_alone_is_no_finish_the_job_resumes(cluster, assets, tmp_path):
    """`scancel --signal=TERM JOB` (no cancel) reaches the steps' tasks and not the batch shell, as a
    site's TERM-only preemption does: train.ddp_loop's ranks (srun launcher: no agent between) save
    and exit 0. Unfinished training is no finish: the job is requeued, resumes from that checkpoint,
    trains every step once; no failure counted."""
    from tests.e2e.test_fault_tolerance import progress_steps, wait_progress

    steps = 40
    job_id = render_and_submit(tmp_path, ["--nodes", "1", "--gpus", "1", "--module", "train.ddp_loop",
                                          "--launcher", "srun", "--env", "SLURMGEN_TEST_STEP_SLEEP=0.5"],
                               ddp_args(assets, tmp_path, steps), wait=False)
    try:
        wait_progress(job_id, tmp_path / "run", 3)
        subprocess.run(["scancel", "--signal=TERM", job_id], check=True)
        info = wait_with_nudges(job_id, timeout=300)
    finally:
        slurm_helpers.cancel(job_id)
    log = job_log(tmp_path, job_id)
    assert info["State"] == "COMPLETED" and info["Restarts"] == "1", log[-6000:]
    assert "slurmgen: the ranks stopped at a signal this script never got (a TERM to the steps): as at a" \
           " warning" in log, log[-6000:]
    saved = re.findall(r"stop requested, saved checkpoint at step (\d+)", log)
    assert len(saved) == 1 and f"requeueing job {job_id} (restart 1 of at most" in log, log[-6000:]
    assert re.search(rf"resuming from \S+checkpoint-{saved[0]} at step {saved[0]}", log), log[-6000:]
    assert progress_steps(tmp_path / "run") == list(range(1, steps + 1)), log[-6000:]
    record = json.loads((tmp_path / "logs" / f".slurmgen-{job_id}" / "state.json").read_text())
    assert record["failures"] == [] and record["excluded"] == [], record


# A user's gloo loop that finishes its work and is then aborted after Python's exit on one rank, as
# gloo's threads torn down in a C++ destructor do ("terminate called without an active exception",
# SIGABRT; seen after Lightning's `Trainer.fit` ended): the abort is registered as a C++ destructor is
# (__cxa_atexit), so it runs after every atexit handler. ABORT_RANK; FAIL_RANK raises after the work.
ENDS_THEN_ABORTS = '''
import ctypes, os, sys
import torch, torch.distributed as dist

dist.init_process_group("gloo")
rank, out = dist.get_rank(), sys.argv[1]
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(1, 6):
    opt.zero_grad()
    model(torch.randn(2, 4)).sum().backward()
    opt.step()
    t = torch.ones(1)
    dist.all_reduce(t)
    if rank == 0:
        with open(os.path.join(out, "steps"), "a") as f:
            f.write(f"{step}\\n")
print(f"rank {rank}: work done", flush=True)
if str(rank) == os.environ["ABORT_RANK"]:
    libc = ctypes.CDLL(None)
    libc.__cxa_atexit(ctypes.cast(libc.abort, ctypes.c_void_p), None, None)
if str(rank) == os.environ.get("FAIL_RANK"):
    raise RuntimeError("saving the model failed")
'''


@pytest.mark.timeout(400)
def test_a_script_that_finished_and_then_aborted_in_pythons_exit_is_finished_not_retried(cluster, tmp_path):
    """Issue 41's exit abort: rank 0 of a finished plain script dies with SIGABRT after Python's exit;
    every rank had ended its script (the rank hooks' marks), so the job is COMPLETED in one run, no failure
    counted, nothing requeued. The twin, whose rank 1 raised after its work before the same abort, has
    no mark from rank 1: a failure (with --max-failures 0, the job fails rather than requeueing)."""
    production(cluster)
    jobs = []
    for name, nodes, env in (("ended", "node1,node2", []), ("raised", "node3,node4", ["--env", "FAIL_RANK=1"])):
        workdir = tmp_path / name
        (workdir / "out").mkdir(parents=True)
        (workdir / "loop.py").write_text(ENDS_THEN_ABORTS)
        args = ["--nodes", "2", "--gpus", "1,1", "--nodelist", nodes, "--script", str(workdir / "loop.py"),
                "--env", "ABORT_RANK=0", *env, "--max-failures", "0", "--job-name", name]
        jobs.append((render_and_submit(workdir, args, [str(workdir / "out")], wait=False), workdir))
    ended, raised = [JobRun(job_id, slurm_helpers.wait_job(job_id, timeout=300), workdir) for job_id, workdir in jobs]
    log = ended.log
    assert ended.state == "COMPLETED" and ended.info["Restarts"] == "0", log[-6000:]
    assert "slurmgen: every rank ended its script; rank 0 was ended by SIGABRT in Python's exit after that" in log, \
        log[-6000:]
    assert (ended.workdir / "out" / "steps").read_text().split() == ["1", "2", "3", "4", "5"]
    record = json.loads((ended.workdir / "logs" / f".slurmgen-{ended.job_id}" / "state.json").read_text())
    assert record["failures"] == [] and record["restarts"] == 0 and record["state"] == "finished", record
    assert raised.state == "FAILED" and "every rank ended its script" not in raised.log, raised.log[-6000:]
    assert "no retry left (--max-failures 0)" in raised.log, raised.log[-6000:]
