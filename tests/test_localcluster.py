"""The local Slurm cluster (tests/localcluster.sh) and the helpers in tests/slurm_helpers.py,
with real jobs: plain, het, failing, cancelled, requeued, and TCP between nodes.

Skipped with the reason when no cluster answers, except with CI=true where that is a failure."""
import subprocess
import sys
import textwrap
import time

import pytest

from tests import slurm_helpers as sh
from tests.conftest import skip_or_fail


@pytest.fixture(scope="module")
def nodes():
    """{node name: GPU count} of the running cluster."""
    ok, reason = sh.cluster_available()
    if not ok:
        skip_or_fail(f"no Slurm cluster: {reason}")
    out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %G"], capture_output=True, text=True,
                         check=True).stdout
    layout = {}
    for row in out.splitlines():
        name, gres = row.split()[:2]
        gpus = 0
        for item in gres.split(","):
            parts = item.split("(")[0].split(":")
            if parts[0] == "gpu":
                gpus = int(parts[-1])
        layout[name] = gpus
    return layout


def script(tmp_path, body, name="job.sh"):
    path = tmp_path / name
    path.write_text("#!/bin/bash\n" + textwrap.dedent(body).lstrip())
    return path


def run(tmp_path, body, *args, timeout=60):
    job_id = sh.submit(script(tmp_path, body), "-o", str(tmp_path / "out-%j.txt"), *args, cwd=tmp_path)
    result = sh.wait_job(job_id, timeout)
    out = tmp_path / f"out-{job_id}.txt"
    return job_id, result, (out.read_text() if out.exists() else "")


# --- no cluster needed -------------------------------------------------------------------------

@pytest.mark.unit
def test_parse_kv_keeps_values_with_spaces_and_odd_keys():
    line = ("JobId=7 JobName=my job HetJobId=7 HetJobOffset=0 JobState=COMPLETED Reason=None "
            "Comment=hello world ReqB:S:C:T=0:0:*:* CPUs/Task=2 TresPerNode=gres:gpu:1 "
            "Command=/tmp/a b/job.sh ExitCode=0:0")
    kv = sh.parse_kv(line)
    assert kv["JobName"] == "my job"
    assert kv["Comment"] == "hello world"
    assert kv["ReqB:S:C:T"] == "0:0:*:*"
    assert kv["CPUs/Task"] == "2"
    assert kv["TresPerNode"] == "gres:gpu:1"
    assert kv["Command"] == "/tmp/a b/job.sh"
    assert kv["ExitCode"] == "0:0"


@pytest.mark.unit
def test_terminal_states_match_the_brief():
    assert sh.TERMINAL_STATES == {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL",
                                  "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL", "DEADLINE"}


# --- real jobs ---------------------------------------------------------------------------------

@pytest.mark.cluster
def test_every_node_runs_a_step_with_its_own_hostname(nodes, tmp_path):
    t0 = time.monotonic()
    job_id, result, out = run(tmp_path, """
        srun -l python3 -c 'import socket; print(socket.gethostname())'
        srun hostname
    """, f"--nodes={len(nodes)}")
    assert result["State"] == "COMPLETED", out
    assert result["ExitCode"] == "0:0"
    assert not result["het"] and result["component_states"] == ["COMPLETED"]
    # srun's own notes ("step creation temporarily disabled, retrying" while the first step's
    # CPUs and memory are released on a loaded machine) are not the steps' output
    lines = [w for line in out.splitlines() if not line.startswith("srun: ") for w in line.split()]
    assert sorted(set(lines) - {f"{i}:" for i in range(len(nodes))}) == sorted(nodes)
    assert time.monotonic() - t0 < 30


@pytest.mark.cluster
def test_job_info_parses_a_finished_job(nodes, tmp_path):
    job_id, result, _ = run(tmp_path, "true\n", "--comment", "two words", "-J", "info probe")
    info = sh.job_info(job_id)
    assert info["JobId"] == job_id
    assert info["JobState"] == "COMPLETED"
    assert info["Comment"] == "two words"
    assert info["JobName"] == "info probe"
    assert info["WorkDir"] == str(tmp_path)
    assert len(info["components"]) == 1
    with pytest.raises(LookupError):
        sh.job_info(999999999)


@pytest.mark.cluster
def test_failing_job_reports_failed_and_its_exit_code(nodes, tmp_path):
    _, result, _ = run(tmp_path, "echo about to fail; exit 3\n")
    assert result["State"] == "FAILED"
    assert result["ExitCode"] == "3:0"


def _het_layout_ok(nodes):
    ones = [n for n, g in nodes.items() if g >= 1]
    twos = [n for n, g in nodes.items() if g >= 2]
    return len(twos) >= 2 and len(ones) >= 4


@pytest.mark.cluster
def test_het_job_components_and_gpus(nodes, tmp_path):
    if not _het_layout_ok(nodes):
        skip_or_fail(f"needs two 1-GPU and two 2-GPU nodes (layout {nodes})")
    job_id, result, out = run(tmp_path, """
        #SBATCH --nodes=2 --gres=gpu:1
        #SBATCH hetjob
        #SBATCH --nodes=2 --gres=gpu:2
        srun --het-group=0 bash -c 'echo g0 $(hostname) $CUDA_VISIBLE_DEVICES $SLURM_GPUS_ON_NODE'
        srun --het-group=1 bash -c 'echo g1 $(hostname) $CUDA_VISIBLE_DEVICES $SLURM_GPUS_ON_NODE'
    """)
    assert result["State"] == "COMPLETED", out
    assert result["het"]
    assert result["component_states"] == ["COMPLETED", "COMPLETED"]
    assert [c["HetJobOffset"] for c in result["Components"]] == ["0", "1"]
    rows = sorted(line.split() for line in out.splitlines() if line.startswith("g"))
    assert [r[0] for r in rows] == ["g0", "g0", "g1", "g1"]
    assert all(r[2:] == ["0", "1"] for r in rows[:2]), rows
    assert all(r[2:] == ["0,1", "2"] for r in rows[2:]), rows
    assert all(nodes[r[1]] >= 2 for r in rows[2:])


@pytest.mark.cluster
def test_one_task_per_gpu_follows_the_gpu_counts(nodes, tmp_path):
    if sorted(nodes.values()) != [1, 1, 2, 2]:
        skip_or_fail(f"needs the 1,1,2,2 layout (layout {nodes})")
    _, result, out = run(tmp_path, """
        srun bash -c 'echo $(hostname) $SLURM_LOCALID $CUDA_VISIBLE_DEVICES'
    """, "-N4", "-n6", "--gpus-per-task=1")
    assert result["State"] == "COMPLETED", out
    per_host = {}
    for line in out.splitlines():
        host, local_id, cvd = line.split()
        per_host.setdefault(host, []).append(local_id)
    assert {h: len(v) for h, v in per_host.items()} == nodes


@pytest.mark.cluster
def test_tcp_between_nodes(nodes, tmp_path):
    if len(nodes) < 2:
        skip_or_fail("needs two nodes")
    server = tmp_path / "tcp.py"
    server.write_text(textwrap.dedent("""
        import os, socket, sys, time
        master, rank = sys.argv[1], int(os.environ["SLURM_PROCID"])
        if rank == 0:
            s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("", 29517)); s.listen(); c, addr = s.accept()
            print("server", socket.gethostname(), c.recv(100).decode(), flush=True)
            c.sendall(b"pong")
        else:
            for _ in range(200):
                try:
                    c = socket.create_connection((master, 29517), timeout=2); break
                except OSError:
                    time.sleep(0.1)
            c.sendall(("ping-from-" + socket.gethostname()).encode())
            print("client", socket.gethostname(), c.recv(100).decode(), flush=True)
    """))
    _, result, out = run(tmp_path, f"""
        #SBATCH --nodes=2 --ntasks=2 --ntasks-per-node=1
        master=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)
        srun {sys.executable} {server} "$master"
    """)
    assert result["State"] == "COMPLETED", out
    rows = sorted(line.split() for line in out.splitlines())
    assert rows[0][0] == "client" and rows[0][2] == "pong", out
    assert rows[1][0] == "server" and rows[1][2] == f"ping-from-{rows[0][1]}", out
    assert rows[0][1] != rows[1][1]


@pytest.mark.cluster
def test_wait_job_times_out_with_the_job_text_then_cancel(nodes, tmp_path):
    job_id = sh.submit(script(tmp_path, "sleep 120\n"), "-o", str(tmp_path / "sleep.out"))
    with pytest.raises(TimeoutError) as excinfo:
        sh.wait_job(job_id, timeout=1)
    assert f"JobId={job_id}" in str(excinfo.value)
    sh.cancel(job_id)
    result = sh.wait_job(job_id, timeout=30)
    assert result["State"] == "CANCELLED"


@pytest.mark.cluster
def test_requeued_het_job_restarts_after_a_nudge(nodes, tmp_path):
    if len([n for n, g in nodes.items() if g >= 1]) < 2:
        skip_or_fail("needs two GPU nodes")
    path = script(tmp_path, """
        #SBATCH --nodes=1 --gres=gpu:1 --requeue --open-mode=append
        #SBATCH hetjob
        #SBATCH --nodes=1 --gres=gpu:1
        echo "run restart_count=${SLURM_RESTART_COUNT:-0}"
        if [ "${SLURM_RESTART_COUNT:-0}" = 0 ]; then
            scontrol requeue "$SLURM_JOB_ID"
            sleep 60
        fi
        srun --het-group=1 true
    """)
    job_id = sh.submit(path, "-o", str(tmp_path / "rq.out"), cwd=tmp_path)
    sh.wait_state(job_id, lambda i: i.get("Restarts") == "1" and i["JobState"] == "PENDING", timeout=60)
    # Slurm holds a requeued job ~2 minutes (EligibleTime) and an idle cluster's backfill pass does
    # not look again: nudge it (tests only), once the requeue is a few seconds old
    assert sh.nudge_requeued(job_id)
    result = sh.wait_job(job_id, timeout=60)
    out = (tmp_path / "rq.out").read_text()
    assert result["State"] == "COMPLETED", out
    assert result["component_states"] == ["COMPLETED", "COMPLETED"]
    assert "run restart_count=0" in out and "run restart_count=1" in out
    assert all(c["Restarts"] == "1" for c in result["Components"])
