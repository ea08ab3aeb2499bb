"""GPU isolation on the production-profile cluster (task/cgroup, ConstrainDevices): what each rank
may open and what CUDA_VISIBLE_DEVICES says, for every launcher.

The GPUs are fake character devices (major 195, like /dev/nvidiaN) with no driver behind them:
opening one the device cgroup allows fails with ENXIO, one it denies with EPERM. So a rank's
errno per device file is exactly the device cgroup's verdict.
"""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import skip_or_fail
from tests.e2e.conftest import OFFLINE, REPO, render_and_submit

UNEVEN = ["--nodes", "4", "--gpus", "1,1,2,2"]
DEVICES = Path(os.environ.get("SLURMGEN_CLUSTER_DIR", "/tmp/slurmgen-cluster")) / "dev"

PROBE = textwrap.dedent('''
    """Each rank: its placement, CUDA_VISIBLE_DEVICES, and the errno of opening every fake GPU."""
    import errno, json, os, socket, sys
    from pathlib import Path

    opened = {}
    for dev in sorted(Path(os.environ["PROBE_DEVICES"]).glob("nvidia*")):
        try:
            os.close(os.open(dev, os.O_RDWR))
            opened[dev.name] = "opened"
        except OSError as err:
            opened[dev.name] = errno.errorcode[err.errno]
    keys = ("RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "WORLD_SIZE", "CUDA_VISIBLE_DEVICES")
    row = {"host": socket.gethostname(), **{k: os.environ.get(k) for k in keys}, "open": opened}
    if row["RANK"] is None:  # the submit path: its task helper exported nothing yet for a script?
        row["RANK"] = os.environ.get("SLURM_PROCID")
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    (out / f"rank{row['RANK']}.json").write_text(json.dumps(row))
''')

# Every rank sees all of its node's GPUs (NCCL needs the peers for P2P/NVLink) and uses its own by
# local rank; nothing of its node is denied.
WHOLE_NODES = {
    "0": ("node1", "0", "0", "1", {"nvidia0": "ENXIO"}),
    "1": ("node2", "0", "0", "1", {"nvidia0": "ENXIO"}),
    "2": ("node3", "0,1", "0", "2", {"nvidia0": "ENXIO", "nvidia1": "ENXIO"}),
    "3": ("node3", "0,1", "1", "2", {"nvidia0": "ENXIO", "nvidia1": "ENXIO"}),
    "4": ("node4", "0,1", "0", "2", {"nvidia0": "ENXIO", "nvidia1": "ENXIO"}),
    "5": ("node4", "0,1", "1", "2", {"nvidia0": "ENXIO", "nvidia1": "ENXIO"}),
}


def production(cluster):
    layout = Path(os.environ.get("SLURMGEN_CLUSTER_DIR", "/tmp/slurmgen-cluster")) / "layout"
    if "PROFILE=production" not in layout.read_text():
        skip_or_fail("the local cluster runs the plain profile: no device cgroup to test")


def table(out: Path) -> dict:
    rows = {}
    for path in sorted(out.glob("rank*.json")):
        row = json.loads(path.read_text())
        # Devices a node's gres.conf does not list (nvidia1 on a 1-GPU node) are not Slurm's to deny.
        opened = {d: e for d, e in row["open"].items() if row["host"] in ("node3", "node4") or d == "nvidia0"}
        rows[row["RANK"]] = (row["host"], row["CUDA_VISIBLE_DEVICES"], row["LOCAL_RANK"],
                             row["LOCAL_WORLD_SIZE"], opened)
    return rows


@pytest.mark.core
@pytest.mark.timeout(300)
@pytest.mark.parametrize("launcher", ["torchrun", "srun"])
def test_rendered_script_ranks_see_their_nodes_gpus(cluster, tmp_path, launcher):
    production(cluster)
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    job = render_and_submit(tmp_path, [*UNEVEN, "--launcher", launcher, "--script", str(probe),
                                       "--env", f"PROBE_DEVICES={DEVICES}"], [str(tmp_path / "ranks")],
                            timeout=240)
    assert job.state == "COMPLETED", job.log
    assert table(tmp_path / "ranks") == WHOLE_NODES


@pytest.mark.core
@pytest.mark.timeout(300)
def test_accelerate_launcher_on_a_uniform_layout(cluster, tmp_path):
    """--launcher accelerate (uniform layouts only), end to end: 2 nodes x 2 GPUs, one accelerate
    launcher per node, every rank placed and seeing its node's GPUs; every step through
    --container apptainer:IMAGE (a stand-in apptainer that records and runs on the host)."""
    import json
    import shutil

    production(cluster)
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    (tmp_path / "bin").mkdir()
    shutil.copy(REPO / "tests" / "shims" / "apptainer", tmp_path / "bin")
    record = tmp_path / "apptainer.jsonl"
    job = render_and_submit(tmp_path, ["--nodes", "2", "--gpus", "2", "--launcher", "accelerate",
                                       "--script", str(probe), "--env", f"PROBE_DEVICES={DEVICES}",
                                       "--container", "apptainer:/images/train.sif",
                                       "--setup", f"export PATH={tmp_path / 'bin'}:$PATH",
                                       "--env", f"APPTAINER_STANDIN_LOG={record}"],
                            [str(tmp_path / "ranks")], timeout=240)
    assert job.state == "COMPLETED", job.log
    calls = [json.loads(line) for line in record.read_text().splitlines()]
    assert sorted(c["command"][0] for c in calls) == ["bash", "bash", "python3", "python3"], calls
    assert {c["image"] for c in calls} == {"/images/train.sif"} and len({c["host"] for c in calls}) == 2
    both = {"nvidia0": "ENXIO", "nvidia1": "ENXIO"}
    hosts = sorted({row[0] for row in table(tmp_path / "ranks").values()})
    assert len(hosts) == 2
    assert table(tmp_path / "ranks") == {
        "0": (hosts[0], "0,1", "0", "2", both), "1": (hosts[0], "0,1", "1", "2", both),
        "2": (hosts[1], "0,1", "0", "2", both), "3": (hosts[1], "0,1", "1", "2", both)}


@pytest.mark.core
@pytest.mark.timeout(300)
def test_submit_path_ranks_see_their_nodes_gpus(cluster, tmp_path):
    """One Slurm task per GPU, yet every task sees its node's GPUs (not one each: per-task
    binding hid the peers from NCCL and, with ConstrainDevices, denied them)."""
    production(cluster)
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    cmd = [sys.executable, "-m", "slurmgen.submit", "--folder", str(tmp_path / "submitit"),
           "--cpus-per-gpu", "1", *OFFLINE, "--env", f"PROBE_DEVICES={DEVICES}", *UNEVEN,
           "--script", str(probe), "--", str(tmp_path / "ranks")]
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=240,
                          env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert table(tmp_path / "ranks") == WHOLE_NODES


@pytest.mark.core
@pytest.mark.timeout(300)
def test_a_rank_cannot_open_a_gpu_its_job_was_not_given(cluster, tmp_path):
    """One GPU of node3's two: the rank opens that one (ENXIO, no driver) and is denied the other
    (EPERM), which another job could be using."""
    production(cluster)
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    job = render_and_submit(tmp_path, ["--nodes", "1", "--gpus", "1", "--nodelist", "node3",
                                       "--launcher", "srun", "--script", str(probe),
                                       "--env", f"PROBE_DEVICES={DEVICES}"], [str(tmp_path / "ranks")],
                            timeout=200)
    assert job.state == "COMPLETED", job.log
    row = json.loads((tmp_path / "ranks" / "rank0.json").read_text())
    assert row["host"] == "node3" and row["CUDA_VISIBLE_DEVICES"] == "0"
    assert sorted(row["open"].values()) == ["ENXIO", "EPERM"], row
