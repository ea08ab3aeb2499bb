"""slurmgen.run and slurmgen.attach on the real four-node cluster (GPUs 1,1,2,2), issue 44 item 1: a
function defined in a script's __main__ all-reduces its rank on ranks 0..5 and rank 0's return value
comes back (15), and again after a first run that crashed on rank 1 and was submitted again (the
retry said on stderr); a Job submitted via sbatch is attached from its id alone, rank 3's lines read through
the handle, and its cancel() is final through a would-be requeue. Not run by the session that wrote it
(no cluster there)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import textwrap
from pathlib import Path

import pytest

import slurmgen
from slurmgen.observe.batch_job import BatchJob
from tests import slurm_helpers
from tests.e2e.conftest import BIN, REPO
from tests.e2e.test_fault_tolerance import job_log
from tests.e2e.test_hangs import wait_beat
from tests.e2e.test_job_life import LOOP, wait_for

pytestmark = pytest.mark.cluster

RUN_SCRIPT = textwrap.dedent("""
    import json, os, socket, sys
    import slurmgen

    def all_reduce_rank():
        import torch
        import torch.distributed as dist
        dist.init_process_group("gloo")
        total = torch.tensor([dist.get_rank()])
        dist.all_reduce(total)
        seen = {"sum": int(total), "world": dist.get_world_size(), "rank": dist.get_rank(),
                "host": os.environ.get("SLURMD_NODENAME", socket.gethostname())}
        dist.destroy_process_group()
        return seen

    if __name__ == "__main__":
        result = slurmgen.run(all_reduce_rank, nodes=4, gpus=[1, 1, 2, 2], cpus_per_gpu=1, time="0:10:00",
                              log_dir=sys.argv[1], env={"TOKENIZERS_PARALLELISM": "false"})
        print(json.dumps(result))
""")


@pytest.mark.timeout(480)
def test_run_of_a_function_that_all_reduces_its_rank_returns_15_on_1_1_2_2(cluster, tmp_path):
    (tmp_path / "all_reduce.py").write_text(RUN_SCRIPT)
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state"), "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "all_reduce.py", str(tmp_path / "logs")], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=450)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert (result["sum"], result["world"], result["rank"]) == (15, 6, 0), result  # 0+1+2+3+4+5
    assert result["host"] == "node1", result


RETRY_SCRIPT = textwrap.dedent("""
    import json, os, sys
    import slurmgen

    def crash_once_then_all_reduce(marks):
        import torch
        import torch.distributed as dist
        mark = os.path.join(marks, "crashed-once")
        if os.environ["RANK"] == "1" and not os.path.exists(mark):
            open(mark, "w").close()
            raise RuntimeError("rank 1 crashes on the first run")
        dist.init_process_group("gloo")
        total = torch.tensor([dist.get_rank()])
        dist.all_reduce(total)
        dist.destroy_process_group()
        return int(total)

    if __name__ == "__main__":
        print(json.dumps(slurmgen.run(crash_once_then_all_reduce, sys.argv[2], nodes=4, gpus=[1, 1, 2, 2],
                                      cpus_per_gpu=1, time="0:10:00", log_dir=sys.argv[1])))
""")


@pytest.mark.timeout(600)
def test_run_of_a_function_that_crashes_on_its_first_run_is_retried_and_returns_15(cluster, tmp_path):
    """A function's failure once it was called counts (it has no training step to show): the job is
    submitted again, the function starts again from the top, and rank 0's sum comes back."""
    (tmp_path / "retry.py").write_text(RETRY_SCRIPT)
    (tmp_path / "marks").mkdir()
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state"), "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "retry.py", str(tmp_path / "logs"), str(tmp_path / "marks")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=570)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == 15
    said = [line for line in done.stderr.splitlines() if "submitting again" in line]
    assert len(said) == 1 and said[0].startswith("slurmgen: failure 1 of at most 2 (crash"), done.stderr[-3000:]
    assert said[0].endswith("submitting again; the function starts again from the top"), said
    assert (tmp_path / "marks" / "crashed-once").exists()


@pytest.mark.timeout(600)
def test_a_job_submitted_via_sbatch_is_attached_by_id_read_by_rank_and_cancelled_for_good(cluster, tmp_path,
                                                                                       monkeypatch):
    """As the `slurmgen cancel` test of a rendered job: the cancel comes during a time-limit warning,
    within the runtime's stop grace, after which it would requeue the job; it stays CANCELLED."""
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", "[rank${rank}]:")  # torchrun labels each line
    (tmp_path / "loop.py").write_text(LOOP)
    job = slurmgen.Job(nodes=4, gpus=[1, 1, 2, 2], script=str(tmp_path / "loop.py"), launcher_arg=["--tee=3"],
                       log_dir=str(tmp_path / "logs"), cpus_per_gpu=1, net_check=False,
                       setup=[f"source {BIN / 'activate'}"])
    job_id = job.submit(via="sbatch", path=tmp_path / "job.sh").job_id
    try:
        handle = slurmgen.attach(job_id)  # from the id alone, as another process would
        assert isinstance(handle, BatchJob) and handle.job_id == job_id
        wait_beat(tmp_path, job_id, 3, restarts=0)
        assert handle.state() == "RUNNING"
        lines = handle.logs(rank=3).splitlines()
        assert lines and all(line.startswith("[rank3]:") for line in lines), lines[-20:]
        assert "[rank3]:rank 3 step 1" in lines, lines[-20:]
        subprocess.run(["scancel", "--signal=USR2", "--batch", job_id], check=True)  # the time-limit warning
        wait_for(lambda: "asking every rank to checkpoint" in job_log(tmp_path, job_id), 60, "no warning taken")
        said = handle.cancel()
        assert said.startswith(f"job {job_id} cancelled for good"), said
        time.sleep(40)  # past the stop grace: the runtime would have requeued the job by now
        info = slurm_helpers.job_info(job_id)
    finally:
        slurm_helpers.cancel(job_id)
    log = job_log(tmp_path, job_id)
    assert info["JobState"] == "CANCELLED" and info["Restarts"] == "0", log[-4000:]
    assert handle.wait(timeout=30) == "CANCELLED" and "requeueing job" not in log, log[-4000:]
