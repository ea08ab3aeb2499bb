"""A job's life after submission on the local cluster (1,1,2,2), for a rendered job and a submitted one:
`slurmgen status --json`, `logs --rank 3`, `list` and `cancel`, found from the job id alone through the
per-user index (XDG_STATE_HOME, here the test's own), and the cancel final through a would-be requeue."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import slurmgen as slurmgen_api
from slurmgen.observe.batch_job import BatchJob
from tests import slurm_helpers
from tests.e2e.conftest import BIN, OFFLINE, REPO
from tests.e2e.test_fault_tolerance import ddp_args, job_log
from tests.e2e.test_hangs import wait_beat

UNEVEN = ["--nodes", "4", "--gpus", "1,1,2,2"]

# A user's plain loop: it takes no stop file, so at a time-limit warning the job runtime lets it train on
# for its stop grace (at most 30 s), then stops it and requeues the job: the would-be requeue.
LOOP = '''
import time
import torch, torch.distributed as dist
dist.init_process_group("gloo")
rank = dist.get_rank()
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(1, 2001):
    loss = model(torch.randn(2, 4)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"rank {rank} step {step}", flush=True)
    time.sleep(0.3)
'''


def life_env(tmp_path: Path, **extra) -> dict:
    return {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state"), "PYTHONPATH": str(REPO), **extra}


def slurmgen(env, *args, timeout=150) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "slurmgen"), *args], capture_output=True, text=True, env=env, timeout=timeout)


def wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.5)


def runtime_pid(job_id: str) -> int:
    """The job runtime's process (`python -m slurmgen.job`, on the batch node): all nodes of the local
    cluster share one PID namespace."""
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            environ = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv[1:3] == [b"-m", b"slurmgen.job"] and f"SLURM_JOB_ID={job_id}".encode() in environ:
            return int(entry)
    raise LookupError(f"no job runtime of job {job_id}")


def cancel_within_the_grace(env: dict, job_id: str, mark: Path) -> subprocess.CompletedProcess:
    """`slurmgen cancel` while the runtime is held (SIGSTOP) until the cancel's mark is down: the cancel
    comes within the runtime's stop grace however slow the machine (a loaded one took over 30 s)."""
    runtime = runtime_pid(job_id)
    os.kill(runtime, signal.SIGSTOP)
    try:
        cancel = subprocess.Popen([str(BIN / "slurmgen"), "cancel", job_id], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, env=env)
        deadline = time.monotonic() + 150
        while not mark.exists() and cancel.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        os.kill(runtime, signal.SIGCONT)
    out, err = cancel.communicate(timeout=150)
    return subprocess.CompletedProcess(cancel.args, cancel.returncode, out, err)


@pytest.mark.timeout(600)
def test_status_logs_list_and_a_final_cancel_of_a_rendered_job(cluster, tmp_path, monkeypatch):
    """torchrun labels every rank's line with its global rank (--tee and the prefix template), so
    `logs --rank 3` is rank 3's; the cancel comes during a time-limit warning, within the runtime's stop
    grace, after which it would requeue the job: the job stays CANCELLED, never requeued. The job is a
    slurmgen.Job submitted via sbatch from Python, and slurmgen.attach gets its handle back from the id
    alone, as another process would: its logs(rank=3) and wait() agree with the commands."""
    env = life_env(tmp_path, TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE="[rank${rank}]:")
    for name in ("XDG_STATE_HOME", "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"):  # sbatch exports them to the job
        monkeypatch.setenv(name, env[name])
    monkeypatch.chdir(REPO)
    (tmp_path / "loop.py").write_text(LOOP)
    job = slurmgen_api.Job(nodes=4, gpus=[1, 1, 2, 2], script=str(tmp_path / "loop.py"), launcher_arg=["--tee=3"],
                           log_dir=str(tmp_path / "logs"), cpus_per_gpu=1, net_check=False,
                           setup=[f"source {BIN / 'activate'}"])
    job_id = job.submit(via="sbatch", path=tmp_path / "job.sh").job_id
    try:
        wait_beat(tmp_path, job_id, 3, restarts=0)
        status = slurmgen(env, "status", job_id, "--json")
        assert status.returncode == 0, status.stderr
        [view] = json.loads(status.stdout)
        assert (view["job_id"], view["kind"], view["state"], view["restarts"], view["runs"]) == (
            job_id, "rendered", "RUNNING", 0, 1), view
        assert view["step"] >= 1 and view["excluded"] == [] and view["nodes"], view  # rank 0's beat
        assert view["logs"] and Path(view["logs"][0]).parent == tmp_path / "logs", view
        logs = slurmgen(env, "logs", job_id, "--rank", "3")
        lines = logs.stdout.splitlines()
        assert logs.returncode == 0 and lines and all(l.startswith("[rank3]:") for l in lines), logs.stdout[-2000:]
        assert "[rank3]:rank 3 step 1" in lines, logs.stdout[-2000:]
        handle = slurmgen_api.attach(job_id)
        assert isinstance(handle, BatchJob) and handle.job_id == job_id and handle.state() == "RUNNING"
        assert handle.logs(rank=3).splitlines()[:len(lines)] == lines
        listed = slurmgen(env, "list")
        assert re.search(rf"^{job_id} +slurmgen +rendered +RUNNING +1 +0 ", listed.stdout, re.M), listed.stdout
        subprocess.run(["scancel", "--signal=USR2", "--batch", job_id], check=True)  # the time-limit warning
        wait_for(lambda: "asking every rank to checkpoint" in job_log(tmp_path, job_id), 60, "no warning taken")
        cancel = cancel_within_the_grace(env, job_id, tmp_path / "logs" / f".slurmgen-{job_id}" / "cancelled")
        assert cancel.returncode == 0 and f"job {job_id} cancelled for good" in cancel.stdout, cancel.stderr
        info = slurm_helpers.wait_job(job_id, timeout=120)
    finally:
        slurm_helpers.cancel(job_id)
    log = job_log(tmp_path, job_id)
    assert info["JobState"] == "CANCELLED" and info["Restarts"] == "0", log[-4000:]
    assert "requeueing job" not in log and f"slurmgen: job {job_id} was cancelled" in log, log[-4000:]
    [after] = json.loads(slurmgen(env, "status", job_id, "--json").stdout)
    assert (after["state"], after["cancelled_by"]) == ("CANCELLED", "slurmgen cancel"), after
    assert handle.wait(timeout=30) == "CANCELLED"


@pytest.mark.timeout(600)
def test_status_logs_list_and_a_final_cancel_of_a_submitted_job(cluster, assets, tmp_path):
    """`slurmgen submit --detach`: rank 3's own files; the cancel's TERM stops train.ddp_loop's ranks as a
    preemption would, after which their tasks would requeue the job: it stays CANCELLED."""
    env = life_env(tmp_path)
    folder = tmp_path / "submitit"
    submit = subprocess.run([sys.executable, "-m", "slurmgen.submit", "--detach", "--folder", str(folder),
                             "--cpus-per-gpu", "1", *OFFLINE, *UNEVEN, "--module", "train.ddp_loop", "--",
                             *ddp_args(assets, tmp_path, 2000)], cwd=tmp_path, capture_output=True, text=True,
                            timeout=120, env=env)
    assert submit.returncode == 0, submit.stderr
    job_id = re.search(r"^submitted job (\d+)", submit.stdout, re.M).group(1)
    progress = tmp_path / "run" / "progress.jsonl"
    try:
        wait_for(lambda: progress.exists() and progress.read_text().count("\n") >= 3, 300, "no training step")
        status = slurmgen(env, "status", job_id, "--json")
        assert status.returncode == 0, status.stderr
        [view] = json.loads(status.stdout)
        assert (view["kind"], view["state"], view["restarts"]) == ("submitted", "RUNNING", 0), view
        assert view["step"] >= 1 and view["loss"] is not None, view
        assert view["logs"] == [f"{folder}/{job_id}_R_log.out", f"{folder}/{job_id}_R_log.err"], view
        logs = slurmgen(env, "logs", job_id, "--rank", "3")
        assert logs.returncode == 0 and re.search(r"slurmgen-task: task 3 on node\d: rank 3/6", logs.stdout), logs
        listed = slurmgen(env, "list")
        assert re.search(rf"^{job_id} +slurmgen +submitted +RUNNING ", listed.stdout, re.M), listed.stdout
        cancel = slurmgen(env, "cancel", job_id)
        assert cancel.returncode == 0 and f"job {job_id} cancelled for good" in cancel.stdout, cancel.stderr
        time.sleep(10)  # a requeue by the tasks comes within seconds of their stop
        info = slurm_helpers.job_info(job_id)
    finally:
        slurm_helpers.cancel(job_id)
    assert info["JobState"] == "CANCELLED" and info["Restarts"] == "0", info
    [after] = json.loads(slurmgen(env, "status", job_id, "--json").stdout)
    assert (after["state"], after["cancelled_by"]) == ("CANCELLED", "slurmgen cancel"), after
