"""The process group's two timeouts, with real torchrun workers on this machine: joining waits
for ranks that start late (CI once lost a run to a rank that took 5 s to import on a loaded
host), and once joined a collective still gives up after SLURMGEN_COLLECTIVE_TIMEOUT."""

import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # train_fixtures, whatever the import mode
from train_fixtures import REPO, hf_cache, subprocess_env, torchrun_cmd  # noqa: E402,F401

SCRIPT = """
import os, sys, time
from train import collectives
from train.devices import device_for
from train.distenv import DistEnv

rank = int(os.environ["RANK"])
if rank == 1:
    time.sleep(float(sys.argv[1]))      # a slow start: rank 0 is already waiting to join
denv = DistEnv.from_environ()
collectives.init_process_group(denv, device_for(denv))
print(f"rank {rank} joined", flush=True)
if rank == 1:
    time.sleep(float(sys.argv[2]))      # then a peer that does not come to the barrier
collectives.barrier()
print(f"rank {rank} passed the barrier", flush=True)
"""


def _run(tmp_path, hf_cache, late: float, absent: float):
    script = tmp_path / "join.py"
    script.write_text(SCRIPT)
    env = subprocess_env(hf_cache, SLURMGEN_COLLECTIVE_TIMEOUT="2")
    start = time.monotonic()
    proc = subprocess.run(torchrun_cmd(2, "--standalone", str(script), str(late), str(absent)),
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    return proc, time.monotonic() - start


@pytest.mark.timeout(150)
def test_a_rank_that_starts_later_than_the_collective_timeout_still_joins(tmp_path, hf_cache):
    proc, _ = _run(tmp_path, hf_cache, late=6, absent=0)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "rank 0 passed the barrier" in out and "rank 1 passed the barrier" in out


@pytest.mark.timeout(150)
def test_once_joined_a_collective_gives_up_after_the_collective_timeout(tmp_path, hf_cache):
    proc, _ = _run(tmp_path, hf_cache, late=0, absent=30)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert "rank 0 joined" in out and "rank 0 passed the barrier" not in out
    assert "timed out" in out.lower() or "timeout" in out.lower(), out[-3000:]
