"""Slow nodes (issue 30), end to end on the 1,1,2,2,2 cluster:
* the network check: node3's link slowed both ways (`localcluster.sh node-slow node3 link`, tc tbf)
  and node5 held by another job, so that the job's first run must hold node3: the check names node3 from the
  figures of every node, the job is requeued without it, and the user's plain script (torch only)
  trains on node1, node2, node4 and node5 after a check with no slow link;
* the straggler watch: train.ddp_loop with --spares 1 and --straggler-action exclude runs healthy
  for three windows and three hang timeouts, a save longer than one among them (neither a hang nor
  a straggler named), then node3's CPUs are throttled (`node-slow node3 cpu`, a CFS quota): its
  ranks are named with their ratio, the run stops at a checkpoint, and the job finishes on the spare
  node without a requeue.
bench/net_check.py measures the check's cost and its figures over healthy runs.
"""
from __future__ import annotations

import json
import re
import subprocess
import textwrap
import time

from hostlist import expand_hostlist
from tests import slurm_helpers
from tests.e2e.conftest import CLUSTER, JobRun, render_and_submit
from tests.e2e.test_fault_tolerance import (ddp_args, job_log, progress_steps, progress_times, wait_progress,
                                             wait_with_nudges)
from tests.e2e.test_hangs import UNEVEN, finished_every_step, reports

# 20 steps, not 10, and each rank's figure is the median of its window (train.compute_time): on a
# loaded machine a healthy rank alone on its node measured 3.4x the median over 10 steps, and its mean
# over 20 steps 3.2x (CI-like runs, the second cluster's jobs on the same two cores), while a
# throttled node is slow at most of its forwards (at 5% of a CPU, those that the quota refilled by the
# 0.4 s step sleep cannot hold; its two ranks share it: named at 3.4x and 3.7x in a CI-like run).
WINDOW = 20
RATIO = 3


def slow(node: str, what: str, value: str) -> None:
    proc = subprocess.run(["bash", str(CLUSTER), "node-slow", node, what, value], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def heal(node: str) -> None:
    subprocess.run(["bash", str(CLUSTER), "node-heal", node], capture_output=True, text=True)


def hold(node: str) -> str:
    """A job that keeps node busy (not drained: the runtime counts a drained node out of the
    partition, and would not requeue without node3), once it runs."""
    job = subprocess.run(["sbatch", "--parsable", "-w", node, "-N1", "--gres=gpu:2", "-o", "/dev/null", "--wrap",
                          "sleep 600"], check=True, capture_output=True, text=True).stdout.strip()
    deadline = time.monotonic() + 60
    while slurm_helpers.job_info(job)["JobState"] != "RUNNING":
        assert time.monotonic() < deadline, slurm_helpers.job_info(job)
        time.sleep(0.5)
    return job


# The user's own training (torch only): DDP over gloo, 20 optimizer steps; each rank writes where it ran.
PLAIN = textwrap.dedent("""
    import json, os, sys
    import torch, torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    dist.init_process_group("gloo")
    model = DistributedDataParallel(torch.nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(20):
        model(torch.ones(2, 4)).sum().backward()
        opt.step()
        opt.zero_grad()
    with open(os.path.join(sys.argv[1], f"rank{dist.get_rank()}.json"), "w") as f:
        json.dump({"node": os.environ["SLURMD_NODENAME"], "world": dist.get_world_size()}, f)
    dist.destroy_process_group()
""")


def check_tables(log: str) -> list[str]:
    """The nodes of each network check's table, in order."""
    tables = re.findall(r"slurmgen: network check of \d+ node\(s\) \(gloo\) took [\d.]+ s:\n  node .*\n((?:  node\d+ .*\n)+)", log)
    return [" ".join(line.split()[0] for line in table.splitlines()) for table in tables]


def test_a_node_with_a_slow_link_is_named_and_the_job_trains_without_it(spare_node, tmp_path):
    script, out = tmp_path / "plain.py", tmp_path / "out"
    script.write_text(PLAIN)
    out.mkdir()
    holder = hold("node5")
    slow("node3", "link", "100mbit")
    try:
        # node3's link is shaped to 100 Mbit (0.0125 GB/s) where the local cluster's veth links give 0.3 to
        # 0.8 GB/s, all through this machine's CPU: with half of it taken by the host, a healthy link
        # measured 0.3 of the median and was called slow at the default 0.5.
        job_id = render_and_submit(tmp_path, [*UNEVEN[:4], "--launcher", "srun", "--script", str(script), "--net-check",
                                              "--net-check-ratio", "0.15"],
                                   [str(out)],
                                   wait=False)
        deadline = time.monotonic() + 180
        while "requeueing" not in job_log(tmp_path, job_id):
            assert time.monotonic() < deadline, job_log(tmp_path, job_id)[-4000:]
            time.sleep(0.5)
        subprocess.run(["scancel", holder], check=True)
        job = JobRun(job_id, wait_with_nudges(job_id, timeout=300), tmp_path)
    finally:
        heal("node3")
        subprocess.run(["scancel", holder])
    log = job_log(tmp_path, job_id)
    assert job.state == "COMPLETED", log[-6000:]
    # (Once in a dozen runs a rank of the script aborted at its exit, "terminate called without an
    # active exception", and the job was retried once more: every later check is without node3.)
    tables = check_tables(log)
    assert tables[0] == "node1 node2 node3 node4" and set(tables[1:]) == {"node1 node2 node4 node5"}, log[-6000:]
    assert re.search(r"slurmgen: slow link: node3: 0\.0\d GB/s (sending|receiving) against a median of [\d.]+ GB/s"
                     r" \(below 0\.15 of it\)", log), log[-6000:]
    assert "failure 1 of at most 2 (slow on node3): requeueing job" in log and "excluding node3 (slow)" in log, log[-6000:]
    assert len(re.findall(r"slurmgen: slow link", log)) == 1, log[-6000:]  # the second run's check: no alarm
    ranks = [json.loads(p.read_text()) for p in sorted(out.glob("rank*.json"))]
    assert len(ranks) == 6 and {r["world"] for r in ranks} == {6}, ranks
    assert {r["node"] for r in ranks} == {"node1", "node2", "node4", "node5"}, ranks
    assert job.left_on_nodes == []  # a plain script's ranks too (the rank hooks, at exit)


def test_a_healthy_run_raises_no_alarm_then_a_throttled_node_is_named_and_replaced(spare_node, assets, tmp_path):
    """The healthy part: 70 steps, three straggler windows and more than three times the hang timeout
    (10 s), rank 0 taking 15 s over the checkpoint of step 20 (SLURMGEN_TEST_SAVE_SLEEP) while the
    others wait for it (a save is progress): neither a hang nor a straggler is named."""
    steps, healthy = 130, 70  # 60 after the healthy part: the throttled node fills a window, then the spare
    # One thread per rank: with two, a rank alone on its node (0 and 1) has two CPUs to wait for, on
    # this machine's two cores shared by every rank, and is the job's real straggler.
    # Ratio 3, not the default 2: on this machine the suite's other half shares the two cores with the
    # six ranks, and a healthy rank alone on its node measured 2.1x and 2.2x the median over a window
    # (two CI runs); node3 at 5% of a CPU measures well above 3x.
    job_id = render_and_submit(tmp_path, [*UNEVEN, "--spares", "1", "--straggler-window", str(WINDOW),
                                          "--straggler-ratio", str(RATIO),
                                          "--straggler-action", "exclude", "--hang-timeout", "10",
                                          "--env", "OMP_NUM_THREADS=1", "--env", "SLURMGEN_TEST_STEP_SLEEP=0.4",
                                          "--env", "SLURMGEN_TEST_SAVE_SLEEP=20:15"],
                               ddp_args(assets, tmp_path, steps, save_steps=20), wait=False)
    wait_progress(job_id, tmp_path / "run", healthy, timeout=300)
    _, comp1, spares = (expand_hostlist(c["NodeList"]) for c in slurm_helpers.job_info(job_id)["components"])
    node, spare = comp1[0], spares[0]  # two ranks of component 1
    first, last = progress_times(tmp_path / "run")
    assert last - first >= 3 * 10 + 15, (first, last)
    log = job_log(tmp_path, job_id)
    assert "straggler" not in log and "slurmgen: hang" not in log and not reports(tmp_path, job_id), log[-4000:]
    slow(node, "cpu", "5")
    try:
        job = JobRun(job_id, slurm_helpers.wait_job(job_id, timeout=600), tmp_path)
    finally:
        heal(node)
    log = job_log(tmp_path, job_id)
    named = re.findall(rf"slurmgen: straggler: rank (\d) on {node}: ([\d.]+)x the median compute time per step"
                       rf" over the last {WINDOW} steps", log)
    assert named and {r for r, _ in named} <= {"2", "3"} and all(float(x) >= RATIO for _, x in named), log[-6000:]
    replaced = re.search(rf"slurmgen: failure 1 of at most 2 \(slow on {node}\): restarting every component inside"
                         rf" the allocation from the newest checkpoint; {node} \(slow\) replaced by spare {spare}", log)
    assert replaced, log[-6000:]
    # Until the replacement only node's ranks are named. After it the test asserts the outcome alone:
    # there the suite's other half shares these two cores with six ranks, and a healthy rank measured
    # 2.1x the median over one window once (a CI run: named, and trained on, as it must be, no spare left).
    assert not re.search(r"straggler: rank \d on (?!" + node + ")", log[:replaced.start()]), log[-6000:]
    finished_every_step(tmp_path, job, steps)
    assert "requeue" not in log.lower() and job.state == "COMPLETED", log[-6000:]
    assert sorted(set(progress_steps(tmp_path / "run"))) == list(range(1, steps + 1))
