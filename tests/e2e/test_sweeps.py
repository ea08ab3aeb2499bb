"""Sweeps on the real cluster (GPUs 1,1,2,2), then `slurmgen report` on one.

* a 2x2 sweep (learning rate x seed) of the tiny SFT on one 1-GPU node: one job array,
  --array=0-3%2; the cluster could hold four such runs at once, Slurm runs at most two;
* a 3-run sweep on 1,1,2,2: three het jobs from the -submit.sh script, run 2 waiting for run 0
  (afterany), at most two at once (on this cluster the GPUs alone allow one);
* every run finishes with its own metrics, values, output directory, log and port; the report
  on the array sweep ranks the runs and draws them.
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests import slurm_helpers
from tests.e2e.conftest import BIN, NET_CHECK_OFF, OFFLINE, REPO, sft_args
from tests.e2e.test_fault_tolerance import ddp_args


def render(workdir: Path, args, train_args) -> subprocess.CompletedProcess:
    cmd = [str(BIN / "slurmgen"), "render", "-o", str(workdir / "job.sh"), "--log-dir", str(workdir / "logs"),
           "--cpus-per-gpu", "1", "--setup", f"source {BIN / 'activate'}", *OFFLINE, *NET_CHECK_OFF, *args, "--", *train_args]
    done = subprocess.run(cmd, cwd=workdir, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done


def running(job_ids: list[str]) -> set[str]:
    """The ids (array tasks as ID_I, het jobs by leader) of those jobs now RUNNING."""
    out = subprocess.run(["squeue", "-h", "-t", "RUNNING", "-j", ",".join(job_ids), "-o", "%i"],
                         capture_output=True, text=True).stdout.split()
    return {re.sub(r"\+\d+$", "", j) for j in out}


def follow(job_ids: list[str], timeout: float) -> int:
    """Poll until none of the jobs is left in the queue; the most ever running at once."""
    most, deadline = 0, time.monotonic() + timeout
    while subprocess.run(["squeue", "-h", "-j", ",".join(job_ids), "-o", "%i"],
                         capture_output=True, text=True).stdout.strip():
        most = max(most, len(running(job_ids)))
        assert time.monotonic() < deadline, subprocess.run(["squeue"], capture_output=True, text=True).stdout
        time.sleep(0.3)
    return most


def progress(run: Path) -> list[dict]:
    """The run's per-step log (train/outputs.py), one dict a step."""
    return [json.loads(line) for line in (run / "progress.jsonl").read_text().splitlines()]


def ports(log_dir: Path) -> set[str]:
    return {m for log in log_dir.glob("*.out") for m in re.findall(r"master \S+:(\d+)", log.read_text())}


@pytest.mark.timeout(900)
def test_a_uniform_sweep_is_one_array_and_the_report_ranks_it(cluster, assets, tmp_path):
    sweep_dir = tmp_path / "sweep"
    train = sft_args(assets, tmp_path, steps=6) + ["--output_dir", str(sweep_dir)]
    done = render(tmp_path, ["--nodes", "1", "--gpus", "1", "--sweep", "learning_rate=3e-3,3e-2",
                             "--sweep", "seed=1,2", "--max-parallel", "2"], train)
    assert "sweep: 4 run(s), at most 2 at once, as one job array (--array=0-3%2)" in done.stdout, done.stdout
    assert done.stdout.rstrip().endswith(f"submit with: sbatch {tmp_path / 'job.sh'}")
    array = slurm_helpers.submit(tmp_path / "job.sh", cwd=REPO)
    most = follow([array], timeout=720)
    assert most == 2, most  # four would fit; the array's %2 holds it to two
    watched = subprocess.run([str(BIN / "slurmgen"), "watch", array, "--timeout", "60"], capture_output=True,
                             text=True)
    assert watched.returncode == 0, watched.stdout + watched.stderr
    assert watched.stdout.rstrip().endswith("sweep: 4 run(s): 4 COMPLETED"), watched.stdout
    assert re.search(rf"^run 3 learning_rate=3e-2 seed=2  job {array}_3  COMPLETED  step 6/6 loss \d",
                     watched.stdout, re.M), watched.stdout
    names = ["learning_rate-3e-3_seed-1", "learning_rate-3e-3_seed-2", "learning_rate-3e-2_seed-1",
             "learning_rate-3e-2_seed-2"]
    assert sorted(p.name for p in sweep_dir.iterdir()) == sorted(names)
    finals, firsts = {}, {}
    for name in names:
        run = sweep_dir / name
        lr, seed = re.fullmatch(r"learning_rate-(\S+)_seed-(\d)", name).groups()
        assert json.loads((run / "sweep.json").read_text()) == {"learning_rate": lr, "seed": seed}
        metrics = json.loads((run / "metrics.json").read_text())
        assert metrics["global_step"] == 6, metrics
        finals[name] = metrics.get("last_loss", metrics.get("train_loss"))
        # the Trainer's own log: this run trained with its own rate (linear decay from it to 0)
        rates = [line["learning_rate"] for line in progress(run)]
        assert len(rates) == 6 and float(lr) >= rates[0] > rates[-1] >= 0, (name, rates)
        firsts[name] = rates[0]
    for seed in ("1", "2"):  # the same schedule at ten times the rate
        ratio = firsts[f"learning_rate-3e-2_seed-{seed}"] / firsts[f"learning_rate-3e-3_seed-{seed}"]
        assert ratio == pytest.approx(10.0), firsts
    logs = list((tmp_path / "logs").glob("*.out"))
    assert len(logs) == 4 and len(ports(tmp_path / "logs")) == 4  # a log and a port per run

    report = subprocess.run([str(BIN / "slurmgen"), "report", str(sweep_dir)], capture_output=True, text=True)
    assert report.returncode == 0, report.stderr
    table = report.stdout.splitlines()
    ranked = [next(n for n in names if n in line) for line in table if any(n in line for n in names)]
    assert ranked == sorted(names, key=lambda n: finals[n]), (report.stdout, finals)
    html = (sweep_dir / "report.html").read_text()
    # two plots, each drawn again at phone width
    assert all(name in html for name in names) and html.count("data:image/png;base64,") == 4
    import matplotlib.image
    pixels = matplotlib.image.imread(str(sweep_dir / "loss.png"))
    assert pixels.std() > 0.01  # not blank
    assert (sweep_dir / "throughput.png").stat().st_size > 1000


@pytest.mark.timeout(900)
def test_an_uneven_sweep_is_het_jobs_at_most_two_at_once(cluster, assets, tmp_path):
    """Three runs of a 1,2 layout (a het job of two nodes: two fit the cluster at once), at most two
    at once: the third waits for the first to end."""
    train = ddp_args(assets, tmp_path, 6)
    train[train.index("--output_dir") + 1] = str(tmp_path / "sweep")
    done = render(tmp_path, ["--nodes", "2", "--gpus", "1,2", "--module", "train.ddp_loop",
                             "--sweep", "lr=3e-3,1e-2,3e-2", "--max-parallel", "2"], train)
    submitter = tmp_path / "job-submit.sh"
    assert done.stdout.rstrip().endswith(f"submit with: bash {submitter}")
    out = subprocess.run(["bash", str(submitter)], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    jobs = re.findall(r"^run (\d): job (\d+): lr=(\S+)$", out.stdout, re.M)
    assert [(r, lr) for r, _, lr in jobs] == [("0", "3e-3"), ("1", "1e-2"), ("2", "3e-2")], out.stdout
    ids = [job for _, job, _ in jobs]
    assert f"Dependency=afterany:{ids[0]}" in slurm_helpers.show_job_text(ids[2])
    assert follow(ids, timeout=720) <= 2
    infos = [slurm_helpers.job_info(i) for i in ids]
    assert [i["JobState"] for i in infos] == ["COMPLETED"] * 3, infos
    assert infos[2]["StartTime"] >= infos[0]["EndTime"]  # run 2 waited for run 0 to end
    for lr in ("3e-3", "1e-2", "3e-2"):
        run = tmp_path / "sweep" / f"lr-{lr}"
        assert json.loads((run / "metrics.json").read_text())["global_step"] == 6
        assert json.loads((run / "sweep.json").read_text()) == {"lr": lr}
        assert {line["learning_rate"] for line in progress(run)} == {float(lr)}  # what the optimizer ran with


@pytest.mark.timeout(600)
def test_prep_runs_first_and_training_does_not_tokenize(cluster, assets, tmp_path):
    """--prep: a CPU-only job tokenizes once; the training job starts after it succeeded and
    loads the prepared data."""
    # A copy of the data under a new path: datasets caches tokenized sets by path, and earlier
    # SFT tests have tokenized the shared one (a cache hit prints no "Tokenizing").
    data = tmp_path / "text.jsonl"
    shutil.copy(assets / "data" / "text.jsonl", data)
    train = sft_args(assets, tmp_path, steps=6)
    train[train.index("--dataset_name") + 1] = str(data)
    done = render(tmp_path, ["--nodes", "1", "--gpus", "1", "--prep"], train)
    submitter = tmp_path / "job-submit.sh"
    assert done.stdout.rstrip().endswith(f"submit with: bash {submitter}"), done.stdout
    out = subprocess.run(["bash", str(submitter)], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    prep, train = re.fullmatch(r"data prep: job (\d+)\ntraining: job (\d+)\n", out.stdout).groups()
    assert f"Dependency=afterok:{prep}" in slurm_helpers.show_job_text(train)
    info = slurm_helpers.wait_job(train, timeout=480)
    prep_info = slurm_helpers.job_info(prep)
    assert (prep_info["JobState"], info["State"]) == ("COMPLETED", "COMPLETED"), slurm_helpers.show_job_text(train)
    assert info["StartTime"] >= prep_info["EndTime"]
    assert "gres" not in prep_info.get("TresPerNode", "")  # no GPU for the prep job
    prep_log = next((tmp_path / "logs").glob(f"slurmgen-prep-{prep}.out")).read_text()
    train_log = next((tmp_path / "logs").glob(f"slurmgen-{train}.out")).read_text()
    assert "Tokenizing train dataset" in prep_log and "slurmgen-train: prepared data saved to" in prep_log
    assert f"slurmgen-train: using the data prepared in {tmp_path / 'run' / 'prepared-data'}" in train_log
    assert "Tokenizing" not in train_log and " train dataset:" not in train_log, train_log[-3000:]
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["global_step"] == 6


@pytest.mark.timeout(600)
def test_submit_path_runs_a_sweep_one_job_per_run(cluster, assets, tmp_path):
    """python -m slurmgen.submit --sweep: a job per run, the second after the first has ended
    (--max-parallel 1, though the cluster could run both), each with its own values and metrics."""
    import os
    import sys

    train = ddp_args(assets, tmp_path, 6)
    train[train.index("--output_dir") + 1] = str(tmp_path / "sweep")
    cmd = [sys.executable, "-m", "slurmgen.submit", "--folder", str(tmp_path / "submitit"), "--cpus-per-gpu", "1",
           *OFFLINE, "--nodes", "1", "--gpus", "1", "--module", "train.ddp_loop", "--sweep", "lr=3e-3,1e-2",
           "--max-parallel", "1", "--", *train]
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONPATH=str(REPO)))
    most = 0
    while proc.poll() is None:
        jobs = subprocess.run(["squeue", "-h", "-t", "RUNNING", "-o", "%i"], capture_output=True, text=True).stdout
        most = max(most, len(jobs.split()))
        time.sleep(0.3)
    out, err = proc.communicate()
    assert proc.returncode == 0, (out + err)[-4000:]
    ids = re.findall(r"^submitted job (\d+): run (\d) \(lr=(\S+)\)", out, re.M)
    assert [(r, lr) for _, r, lr in ids] == [("0", "3e-3"), ("1", "1e-2")], out
    assert out.rstrip().endswith("sweep: 2 run(s): 2 completed, 0 failed"), out
    assert most == 1, most
    first, second = (slurm_helpers.job_info(job) for job, _, _ in ids)
    assert second["StartTime"] >= first["EndTime"]
    for lr in ("3e-3", "1e-2"):
        run = tmp_path / "sweep" / f"lr-{lr}"
        assert json.loads((run / "sweep.json").read_text()) == {"lr": lr}
        assert json.loads((run / "metrics.json").read_text())["global_step"] == 6
        assert {line["learning_rate"] for line in progress(run)} == {float(lr)}  # what the optimizer ran with
