"""slurmgen.Job on the real four-node cluster (GPUs 1,1,2,2): a job made, rendered and submitted from
Python, followed through its handle to COMPLETED, with rank 0's metrics (issue 44, item 1)."""
import os
from pathlib import Path

import pytest

import slurmgen
from tests.e2e.conftest import BIN, REPO, sft_args

pytestmark = pytest.mark.cluster

LAYOUT = {"node1": 1, "node2": 1, "node3": 2, "node4": 2}
STEPS = 6


def job_on_1_1_2_2(assets, workdir: Path) -> "slurmgen.Job":
    """The 1,1,2,2 SFT job render_and_submit makes, as Job keywords (one CPU per GPU, offline)."""
    return slurmgen.Job(nodes=4, gpus=[1, 1, 2, 2], log_dir=str(workdir / "logs"), cpus_per_gpu=1,
                        setup=[f"source {BIN / 'activate'}"], net_check=False,
                        env={"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"},
                        args=sft_args(assets, workdir, steps=STEPS))


@pytest.mark.timeout(480)
def test_a_job_submitted_from_python_with_sbatch_completes(cluster, assets, tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)  # the job's working directory: `python -m train.sft` finds the entry points
    job = job_on_1_1_2_2(assets, tmp_path)
    handle = job.submit(via="sbatch", path=tmp_path / "job.sh")
    assert handle.job_id.isdigit()
    assert (tmp_path / "job.sh").read_text() == job.render().replace(
        "# Command: slurmgen render ", f"# Command: slurmgen render -o {tmp_path / 'job.sh'} ", 1)
    assert handle.wait(timeout=420, interval=1.0) == "COMPLETED", handle.logs()[-3000:]
    assert handle.state() == "COMPLETED"
    metrics = handle.metrics()
    assert metrics is not None and metrics["world_size"] == 6
    assert metrics["ranks_per_host"] == LAYOUT
    assert metrics["global_step"] == STEPS
    assert handle.progress()["step"] == STEPS


@pytest.mark.timeout(480)
def test_the_same_job_submitted_through_submitit_completes(cluster, assets, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]))
    job = slurmgen.Job(nodes=4, gpus=[1, 1, 2, 2], log_dir=str(tmp_path / "logs"), cpus_per_gpu=1,
                       env={"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"},
                       args=sft_args(assets, tmp_path, steps=STEPS))
    handle = job.submit(via="submitit", folder=str(tmp_path / "submitit"))
    assert handle.wait(timeout=420) == "COMPLETED"
    metrics = handle.metrics()
    assert metrics == handle.result()
    assert metrics["world_size"] == 6 and metrics["ranks_per_host"] == LAYOUT and metrics["global_step"] == STEPS
