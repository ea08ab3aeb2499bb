"""Heartbeats at scale (issue 29): the ranks of a node beat into a folder on that node, and one of
them at a time publishes the node's lines to the shared heartbeat folder, at most every
PUBLISH_SECONDS and at once when a save begins. Eight real rank processes on one "node", counted
with inotify: the shared folder sees a publication every PUBLISH_SECONDS, not two file operations
per rank and step, and the hang watch reads every rank from the node's file."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from slurmgen import contract
from slurmgen.job import hangs
from tests.dir_events import DirEvents

REPO = Path(__file__).resolve().parents[1]
RANKS, STEPS, STEP_SECONDS = 8, 60, 0.05

RANK = """
import os, sys, time
from train import heartbeat
for step in range(1, {steps} + 1):
    if step == {steps} and os.environ["RANK"] == "0":
        heartbeat.saving(600)  # a save begins: published at once, whatever the rate
    heartbeat.beat(step)
    time.sleep({sleep})
"""


def test_a_node_publishes_its_ranks_beats_at_a_bounded_rate(tmp_path):
    shared, node_tmp = tmp_path / "beats", tmp_path / "node1-tmp"
    shared.mkdir()
    node_tmp.mkdir()
    events = DirEvents(shared)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
    env.update(SLURMGEN_HEARTBEAT_DIR=str(shared), SLURMGEN_NODE_BEATS="slurmgen-beats-7-0-1", TMPDIR=str(node_tmp),
               SLURMD_NODENAME="node1", PYTHONPATH=str(REPO))
    start = time.monotonic()
    ranks = [subprocess.Popen([sys.executable, "-c", RANK.format(steps=STEPS, sleep=STEP_SECONDS)],
                              env={**env, "RANK": str(r), "LOCAL_RANK": str(r)}) for r in range(RANKS)]
    assert [p.wait(timeout=60) for p in ranks] == [0] * RANKS
    elapsed = time.monotonic() - start

    names = events.drain()
    published = [n for n in names if n == contract.NODE_BEAT_FILE.format(node="node1-0")]
    # Every other event is the publication's own temporary file: two per publication.
    assert len(names) == 2 * len(published), names
    # Once at the first beat, then at most every PUBLISH_SECONDS, and once more for the save.
    assert 1 <= len(published) <= 2 + elapsed / contract.PUBLISH_SECONDS, (len(published), elapsed)
    assert len(published) < STEPS  # under one per node and step; without the node folder: 2 per rank and step
    print(f"{RANKS} ranks x {STEPS} steps in {elapsed:.1f} s: {len(published)} publications, {len(names)} "
          f"file operations in the shared folder (without: {2 * RANKS * STEPS})")

    beats = hangs.read_beats(shared)
    assert sorted(beats) == list(range(RANKS)) and {b.host for b in beats.values()} == {"node1"}
    assert beats[0].step == STEPS and beats[0].save_allowance == 600  # the save was published at once
    assert sorted(os.listdir(shared)) == ["node-node1-0"]  # the node, and its part's first rank
    local = node_tmp / "slurmgen-beats-7-0-1-node1-0"
    assert sorted(p.name for p in local.iterdir()) == ["published", *sorted(f"rank-{r}" for r in range(RANKS))]


def test_without_a_node_folder_each_rank_beats_in_the_shared_one(tmp_path):
    """The submit path or another launcher, which name no node folder: as before. (A container job has
    one: tests/test_container_mounts.py.)"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
    env.update(SLURMGEN_HEARTBEAT_DIR=str(tmp_path), RANK="3", SLURMD_NODENAME="node2", PYTHONPATH=str(REPO))
    subprocess.run([sys.executable, "-c", RANK.format(steps=2, sleep=0)], env=env, check=True)
    assert sorted(os.listdir(tmp_path)) == ["rank-3"]
    assert hangs.read_beats(tmp_path)[3].step == 2


HANGS_AFTER_ONE_BEAT = """
import os, time
from train import heartbeat
if os.environ["RANK"] == "1":
    time.sleep(0.5)  # beats just after rank 0 has published: too soon to publish again
heartbeat.beat(7)
time.sleep(3 * {publish})  # then hangs (a data loader that never returns)
"""


def test_the_last_beat_before_a_hang_is_published(tmp_path):
    """Rank 1's only beat comes 0.5 s after rank 0's publication, within the rate limit; neither
    beats again. It reaches the shared folder anyway, from a thread of either rank."""
    shared = tmp_path / "beats"
    shared.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
    env.update(SLURMGEN_HEARTBEAT_DIR=str(shared), SLURMGEN_NODE_BEATS="b", TMPDIR=str(tmp_path),
               SLURMD_NODENAME="node3", PYTHONPATH=str(REPO))
    code = HANGS_AFTER_ONE_BEAT.format(publish=contract.PUBLISH_SECONDS)
    ranks = [subprocess.Popen([sys.executable, "-c", code], env={**env, "RANK": str(r), "LOCAL_RANK": str(r)})
             for r in range(2)]
    deadline = time.monotonic() + 4 * contract.PUBLISH_SECONDS
    while sorted(hangs.read_beats(shared)) != [0, 1] and time.monotonic() < deadline:
        time.sleep(0.1)
    for rank in ranks:
        rank.kill()
        rank.wait()
    assert sorted(hangs.read_beats(shared)) == [0, 1]
    assert hangs.read_beats(shared)[1].step == 7


LEAVES = """
import os, signal, time
from train import heartbeat
for step in range(1, 4):
    heartbeat.beat(step)
    time.sleep(0.05)
if os.environ["RANK"] == os.environ.get("KILLED_RANK"):
    os.kill(os.getpid(), signal.SIGKILL)  # as a rank killed outright: no exit of its own
time.sleep(0.2 * int(os.environ["RANK"]))  # the node's ranks leave one after another
"""


def test_the_node_folder_goes_with_the_node_s_last_rank(tmp_path):
    """Three ranks of a node exit normally: the last one removes the node folder from the node's
    /tmp (a job leaves nothing there), publishing every rank's last beat first. With one rank
    killed outright, nobody knows it is the last: the folder stays."""
    for killed in ("", "1"):
        shared, node_tmp = tmp_path / f"beats{killed}", tmp_path / f"tmp{killed}"
        shared.mkdir()
        node_tmp.mkdir()
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
        env.update(SLURMGEN_HEARTBEAT_DIR=str(shared), SLURMGEN_NODE_BEATS="b", TMPDIR=str(node_tmp),
                   SLURMD_NODENAME="node2", PYTHONPATH=str(REPO), LOCAL_WORLD_SIZE="3", KILLED_RANK=killed)
        ranks = [subprocess.Popen([sys.executable, "-c", LEAVES], env={**env, "RANK": str(r), "LOCAL_RANK": str(r)})
                 for r in range(3)]
        assert [p.wait(timeout=60) for p in ranks] == ([0, 0, 0] if not killed else [0, -9, 0])
        left = sorted(p.name for p in node_tmp.iterdir())
        assert left == ([] if not killed else ["b-node2-0"]), left
        if not killed:  # the last rank published every rank's last beat before it went
            assert {r: b.step for r, b in hangs.read_beats(shared).items()} == {0: 3, 1: 3, 2: 3}


TWO_PARTS = """
import os, time
from train import heartbeat
steps = 3 if os.environ["RANK"] in ("0", "1") else 12  # the smaller part ends first; the other trains on
for step in range(1, steps + 1):
    heartbeat.beat(step)
    time.sleep(0.1)
"""


def test_two_components_on_one_node_beat_apart_and_the_first_to_end_leaves_the_other_be(tmp_path):
    """A 2-rank component and a 4-rank one on one node (an 8-GPU node holds both): each part has its own
    folder; the smaller part's last rank removes its own only, and the other part's ranks beat on and
    are published to the end (a shared folder made their next beat fail, or stop, when it went)."""
    shared, node_tmp = tmp_path / "beats", tmp_path / "tmp"
    shared.mkdir()
    node_tmp.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
    env.update(SLURMGEN_HEARTBEAT_DIR=str(shared), SLURMGEN_NODE_BEATS="b", TMPDIR=str(node_tmp),
               SLURMD_NODENAME="node5", PYTHONPATH=str(REPO))
    parts = [(r, r, 2) for r in (0, 1)] + [(r, r - 2, 4) for r in (2, 3, 4, 5)]  # (rank, local rank, local world)
    ranks = [subprocess.Popen([sys.executable, "-c", TWO_PARTS], env={**env, "RANK": str(r), "LOCAL_RANK": str(local),
                                                                      "LOCAL_WORLD_SIZE": str(world)})
             for r, local, world in parts]
    assert [p.wait(timeout=60) for p in ranks] == [0] * 6
    assert list(node_tmp.iterdir()) == []  # each part took its own folder along
    assert {r: b.step for r, b in hangs.read_beats(shared).items()} == {0: 3, 1: 3, 2: 12, 3: 12, 4: 12, 5: 12}
    assert sorted(os.listdir(shared)) == ["node-node5-0", "node-node5-2"]
