"""A rank's SIGTERM watch (train.stop.stop_on_term): a rank that cannot take the TERM (blocked in a C
call: a long backward, a synchronising .item(), an NCCL wait) ends after a short grace, where the TERM
is its agent's after a crash elsewhere; at a preemption or the time limit (the batch script made the
stop file) it gets the time to stop and checkpoint instead (issue 41, item 5)."""
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

BUSY = """
import hashlib, sys
from train import stop
stop.stop_on_term()
print("ready", flush=True)
hashlib.pbkdf2_hmac("sha256", b"x", b"y", 4_000_000)  # one C call of seconds: no Python signal handler runs in it
print("took the TERM" if stop.terminated() else "no TERM", flush=True)
"""


def cpu_seconds(pid: int) -> float:
    """The process's user CPU time so far (utime, /proc/PID/stat)."""
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[11]) / os.sysconf("SC_CLK_TCK")


def run_busy(tmp_path, stop_file: bool):
    stop = tmp_path / "stop"
    if stop_file:
        stop.touch()
    env = {**os.environ, "PYTHONPATH": str(REPO), "SLURMGEN_TERM_GRACE": "0.3", "SLURMGEN_STOP_WAIT": "60",
           "SLURMGEN_STOP_FILE": str(stop)}
    proc = subprocess.Popen([sys.executable, "-c", BUSY], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    assert proc.stdout.readline() == "ready\n"
    ready = cpu_seconds(proc.pid)
    while cpu_seconds(proc.pid) < ready + 0.2:  # it is in the C call: its CPU time after "ready" is the call's
        pass
    proc.terminate()
    out, err = proc.communicate(timeout=120)
    return proc.returncode, out, err


def test_at_a_preemption_a_busy_rank_gets_its_stop_wait_and_takes_the_term(tmp_path):
    status, out, err = run_busy(tmp_path, stop_file=True)
    assert (status, out) == (0, "took the TERM\n"), err  # it stops at its step's end and checkpoints


def test_after_a_crash_elsewhere_a_busy_rank_ends_after_the_short_grace(tmp_path):
    status, out, err = run_busy(tmp_path, stop_file=False)
    assert status == 143 and out == "", (status, out)
    assert "SIGTERM not taken within 0.3 s" in err
