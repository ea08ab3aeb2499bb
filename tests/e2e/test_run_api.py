"""slurmgen.run and slurmgen.attach on the real four-node cluster (GPUs 1,1,2,2), issue 44 item 1: a
function defined in a script's __main__ all-reduces its rank on ranks 0..5 and rank 0's return value
comes back (15), and again after a first run that crashed on rank 1 and was submitted again (the
retry said on stderr). A Job submitted via sbatch and attached from its id alone: tests/e2e/test_job_life.py
(one job for the commands and the handle)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from tests.e2e.conftest import REPO

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
