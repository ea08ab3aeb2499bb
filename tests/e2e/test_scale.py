"""The job machinery on 16 nodes (issue 29; bench/scale.py runs 4 to 128): 24 ranks of a program
without torch on nodes giving 2 and 1 GPUs, srun launcher. A rank stopped with SIGSTOP is named
within --hang-timeout + 60 s, a rank that exits 1 ends the job within 30 s, and the shared
heartbeat folder sees at most one file operation per node and step."""
import importlib.util
import os
import subprocess

import pytest

from tests.e2e.conftest import CLUSTER, _layout, _up

_spec = importlib.util.spec_from_file_location("bench_scale", CLUSTER.parents[1] / "bench" / "scale.py")
scale = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(scale)

NODES, HANG_TIMEOUT = 16, 10


@pytest.fixture
def sixteen_nodes(cluster, tmp_path):
    before = _layout()
    subprocess.run(["bash", str(CLUSTER), "down"], check=True, capture_output=True)
    up = subprocess.run(["bash", str(CLUSTER), "up", "--gpus", ",".join(["8", "4"] * (NODES // 2)),
                         "--profile", before.get("PROFILE", "auto"), "--slurm", before.get("SLURM", "system") or "system"],
                        capture_output=True, text=True, env=dict(os.environ, SLURMGEN_CLUSTER_TIMEOUT="120"))
    assert up.returncode == 0, up.stdout + up.stderr
    os.chmod(tmp_path, 0o755)
    yield tmp_path
    _up(before["GPUS"].replace(" ", ","), before, before.get("HOST_NAMES", "same"))


@pytest.mark.timeout(600)
def test_sixteen_nodes_a_stopped_rank_a_failing_rank_and_the_shared_folder(sixteen_nodes):
    row = scale.hung_job(sixteen_nodes, NODES, HANG_TIMEOUT)
    row["fail"] = scale.failed_job(sixteen_nodes, NODES, HANG_TIMEOUT)
    row["nodes"] = NODES
    print("\n| " + " | ".join(scale.HEADER) + " |\n" + scale.line(row))
    assert row["ranks"] == 24
    assert row["hang"] <= HANG_TIMEOUT + 60, row
    assert row["fail"] <= 30, row
    assert row["ops_per_step"] / NODES <= 1, row
    assert row["report"] < 8 * 1024, row  # one line per kind of rank, not one per rank
