"""--gpus auto on the real four-node cluster (GPUs 1,1,2,2): the layout from the GPUs free now."""
from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import pytest

from tests import slurm_helpers
from tests.e2e.conftest import BIN, NET_CHECK_OFF, render_and_submit
from tests.e2e.test_fault_tolerance import wait_with_nudges

HOLD = """#!/bin/bash
#SBATCH --nodes=1 --nodelist=node3 --ntasks=1 --gres=gpu:1 --cpus-per-task=1 --output=/dev/null --time=10
sleep 600
"""


def render(tmp_path: Path, *args):
    return subprocess.run([str(BIN / "slurmgen"), "render", "-o", str(tmp_path / "job.sh"), "--cpus-per-gpu", "2", *NET_CHECK_OFF,
                           "--log-dir", str(tmp_path / "logs"), *args], capture_output=True, text=True, cwd=tmp_path)


def check(tmp_path: Path, *args):
    return subprocess.run([str(BIN / "slurmgen"), "check", "--cpus-per-gpu", "2", "--log-dir", str(tmp_path / "logs"),
                           *args], capture_output=True, text=True, cwd=tmp_path)


def wait_responding(node: str, timeout: float = 60) -> None:
    """Until NODE answers again: Slurm 25.11 shows a resumed node as not responding (idle*) for a
    few seconds, and the next test would see it left out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = subprocess.run(["sinfo", "-h", "-n", node, "-o", "%T"], capture_output=True, text=True).stdout.strip()
        if state and not state.endswith("*"):
            return
        time.sleep(0.5)
    raise AssertionError(f"{node} still not responding after {timeout:g} s: {state}")


def test_an_idle_cluster_gives_1_1_2_2_and_too_much_is_refused(cluster, tmp_path):
    done = render(tmp_path, "--gpus", "auto", "--world-size", "6", "--check", "--", "--model_name_or_path", "m",
                  "--dataset_name", "d")  # --check fails without a model
    assert done.returncode == 0, done.stderr
    assert done.stderr.startswith("--gpus auto: 1,1,2,2 on node[1-4] (world size 6, from the GPUs free now)")
    # render --check: Slurm's own estimate; the idle layout is the only one considered
    assert "\nstart (sbatch --test-only): starts now on node[1-4]\n" in done.stdout, done.stdout
    assert "alternative" not in done.stdout
    assert "# Chosen from the GPUs free at render time: --gpus 1,1,2,2 --nodelist node1,node2,node3,node4" in \
        (tmp_path / "job.sh").read_text()
    refused = render(tmp_path, "--gpus", "auto", "--world-size", "7")
    assert refused.returncode == 2
    assert refused.stderr == ("slurmgen: error: --world-size 7: 6 GPU(s) are free now (node1: 1, node2: 1, node3: 2,"
                              " node4: 2); the closest layout that fits now: --world-size 6 (1,1,2,2 on"
                              " node1,node2,node3,node4)\n")


def test_a_drained_node_is_skipped_and_named(cluster, tmp_path):
    slurm_helpers.drain("node2")
    try:
        done = render(tmp_path, "--gpus", "auto", "--world-size", "5")
    finally:
        subprocess.run(["scontrol", "update", "nodename=node2", "state=resume"], check=True)
        wait_responding("node2")
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines()[:2] == ["--gpus auto: 1,2,2 on node[1,3-4] (world size 5, from the GPUs free now)",
                                            "  node2: idle+drain (slurmgen-test)"]


@pytest.mark.timeout(500)
def test_a_gpu_in_use_is_left_out_and_the_job_starts_at_once(cluster, tmp_path):
    """A 1-GPU job holds a GPU of node3: --world-size 5 takes the other five, starts at once
    and trains with world size 5."""
    hold = tmp_path / "hold.sh"
    hold.write_text(HOLD)
    holder = slurm_helpers.submit(hold)
    try:
        slurm_helpers.wait_state(holder, lambda info: info["JobState"] == "RUNNING", timeout=60)
        # check: this layout starts now; the 3-node one it passed over waits for the holder's
        # 10-minute limit, as Slurm itself estimates
        checked = check(tmp_path, "--gpus", "auto", "--world-size", "5", "--", "--model_name_or_path", "m",
                        "--dataset_name", "d")  # check fails without a model
        assert checked.returncode == 0, checked.stdout + checked.stderr
        assert "\nstart (sbatch --test-only): starts now on node[1-4]\n" in checked.stdout, checked.stdout
        assert re.search(r"^alternative --gpus 1,2,2 --nodelist node1,node3,node4 \(3 nodes, once the resources in"
                         r" use are free\): starts at \S+ \S+ \(in (9|10) min\) on node\[1,3-4\]$",
                         checked.stdout, re.M), checked.stdout
        job = render_and_submit(tmp_path, ["--gpus", "auto", "--world-size", "5",
                                           "--script", str(Path(__file__).parent / "probe_ranks.py")],
                                [str(tmp_path / "ranks.json")], wait=False)
        started = time.monotonic()
        info = slurm_helpers.wait_state(job, lambda i: i["JobState"] != "PENDING", timeout=60)
        assert time.monotonic() - started < 60, info
        # with nudges: a step Slurm refuses is retried by a requeue (seen once with 22.05)
        info = wait_with_nudges(job, timeout=360)
    finally:
        slurm_helpers.cancel(holder)
    text = (tmp_path / "job.sh").read_text()
    assert "--gpus 1,1,1,2 --nodelist node1,node2,node3,node4" in text
    assert info["State"] == "COMPLETED", slurm_helpers.show_job_text(job)
    ranks = json.loads((tmp_path / "ranks.json").read_text())
    assert ranks["world_size"] == 5 and sorted(ranks["hosts"]) == ["node1", "node2", "node3", "node4", "node4"]


@pytest.mark.timeout(400)
def test_submit_path_takes_the_layout_from_the_free_gpus(cluster, tmp_path):
    """python -m slurmgen.submit --gpus auto: the same choice, pinned to its nodes; it trains
    with the world size asked for."""
    from tests.e2e.test_submit import run_submit

    proc = run_submit(tmp_path, ["--gpus", "auto", "--world-size", "6",
                                 "--script", str(Path(__file__).parent / "probe_ranks.py")],
                      [str(tmp_path / "ranks.json")], timeout=300)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert proc.stderr.startswith("--gpus auto: 1,1,2,2 on node[1-4] (world size 6, from the GPUs free now)")
    ranks = json.loads((tmp_path / "ranks.json").read_text())
    assert ranks["world_size"] == 6
    assert sorted(ranks["hosts"]) == ["node1", "node2", "node3", "node3", "node4", "node4"]
