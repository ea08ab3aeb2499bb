"""The code snapshot on the real four-node cluster (GPUs 1,1,2,2), issue 44 item 3: the code a job
runs is the code rendered, not the code on the shared file system when a run starts.

* a script in a git repository, edited while its job is held in the queue (`sbatch --hold`, edit,
  `scontrol release`), runs as it was rendered, on every rank, and the log names the commit;
* a job requeued by the time-limit warning (`scancel --signal=USR2 --batch`, Slurm's warning's
  stand-in) runs the same snapshot in its second run, though the script was edited between them.

The user's script is plain Python (no torch): it prints which version of it runs, from where."""
from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pytest

from tests import slurm_helpers
from tests.e2e.conftest import JobRun, render_and_submit
from tests.e2e.test_fault_tolerance import wait_with_nudges

UNEVEN = ["--nodes", "4", "--gpus", "1,1,2,2", "--launcher", "srun"]
VERSION = re.compile(r"^code (v\d) run (\d+) rank (\d+) from (\S+)$", re.M)

SCRIPT = """\
import os, time
restart = int(os.environ.get("SLURM_RESTART_COUNT", "0"))
print(f"code {version} run {{restart}} rank {{os.environ.get('RANK')}} from {{__file__}}", flush=True)
stop = os.environ.get("SLURMGEN_STOP_FILE", "")
while restart == 0 and {wait_first_run} and not (stop and os.path.exists(stop)):
    time.sleep(0.5)  # until the warning asks every rank to stop: then a clean end, and the job requeues
"""


def write_script(folder: Path, version: str, wait_first_run: bool = False) -> Path:
    path = folder / "job_code.py"
    path.write_text(SCRIPT.format(version=version, wait_first_run=wait_first_run))
    return path


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.email=t@example.org", "-c", "user.name=t", *args],
                          check=True, capture_output=True, text=True).stdout


def said(log: str) -> list[tuple[str, int, int, str]]:
    """(version, run, rank, file) for every line the user's script printed."""
    return [(v, int(run), int(rank), f) for v, run, rank, f in VERSION.findall(log)]


@pytest.mark.core
@pytest.mark.timeout(300)
def test_a_script_edited_while_its_job_is_held_runs_as_rendered(cluster, tmp_path):
    repo = tmp_path / "proj"
    repo.mkdir()
    script = write_script(repo, "v1")
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "v1")
    commit = git(repo, "rev-parse", "HEAD").strip()
    job_id = render_and_submit(tmp_path, [*UNEVEN, "--script", str(script)], wait=False, hold=True)
    try:
        slurm_helpers.wait_state(job_id, lambda info: info["JobState"] == "PENDING", timeout=30)
        write_script(repo, "v2")  # edited while queued, and committed
        git(repo, "commit", "-qam", "v2")
        slurm_helpers.release(job_id)
        info = slurm_helpers.wait_job(job_id, timeout=240)
    finally:
        slurm_helpers.cancel(job_id)
    job = JobRun(job_id, info, tmp_path)
    assert job.state == "COMPLETED", job.log
    lines = said(job.log)
    assert sorted(rank for _, _, rank, _ in lines) == list(range(6)), job.log
    assert {v for v, _, _, _ in lines} == {"v1"}, job.log
    snapshots = tmp_path / "logs" / "snapshots"
    assert {f for _, _, _, f in lines} == {str(p / "job_code.py") for p in snapshots.iterdir() if p.is_dir()}, job.log
    assert f"slurmgen: code: snapshot {snapshots}/" in job.log and f"(commit {commit};" in job.log, job.log


@pytest.mark.timeout(600)
def test_a_requeued_job_runs_the_same_snapshot(cluster, tmp_path):
    folder = tmp_path / "code"
    folder.mkdir()
    script = write_script(folder, "v1", wait_first_run=True)
    job_id = render_and_submit(tmp_path, [*UNEVEN, "--script", str(script), "--grace", "60"], wait=False)
    try:
        deadline = time.monotonic() + 180
        while len(said(JobRun(job_id, {}, tmp_path).log)) < 6:  # every rank runs
            assert time.monotonic() < deadline, JobRun(job_id, {}, tmp_path).log
            time.sleep(0.5)
        write_script(folder, "v2")  # edited before the requeue's run starts
        subprocess.run(["scancel", "--signal=USR2", "--batch", job_id], check=True)
        info = wait_with_nudges(job_id, timeout=540)
    finally:
        slurm_helpers.cancel(job_id)
    job = JobRun(job_id, info, tmp_path)
    assert job.state == "COMPLETED" and int(info["Restarts"]) >= 1, job.log
    lines = said(job.log)
    assert {v for v, _, _, _ in lines} == {"v1"}, job.log
    assert sorted(rank for _, run, rank, _ in lines if run == 1) == list(range(6)), job.log
    assert len({f for _, _, _, f in lines}) == 1, job.log  # both runs: the one copy
    codes = re.findall(r"^slurmgen: code: (.*)$", job.log, re.M)
    starts = re.findall(rf"slurmgen: job {job_id} \(restart \d+ of at most", job.log)
    assert len(codes) == len(starts) >= 2 and len(set(codes)) == 1, job.log
    assert "(not in a git repository;" in codes[0], job.log
