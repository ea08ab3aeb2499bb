"""How the job machinery's cost grows with the node count (issue 29): the same two jobs on a local
cluster of 4, 16, 64 and 128 nodes (fake GPUs, 8 and 4 per node in turn), each node giving the job
2 or 1 of them (two het components: uneven), the srun launcher, and a rank program without torch
that beats through slurmgen's heartbeat and stops at the stop file. One table:

  start      job start (Slurm's StartTime) to every rank running
  preflight  the preflight step on every node (the runtime's own figure)
  fail       one rank exits 1 at its 5th step: from its exit to the job ending FAILED
  hang       one rank stopped (SIGSTOP): from the stop to the hang report naming it (--hang-timeout 30)
  report     the hang report's size
  runtime    the batch-side job runtime's peak memory (VmHWM) and CPU seconds, over the hung job
  ops/step   file operations (created or renamed entries) per step in the shared heartbeat folder,
             over 10 s of training, and the same per node

    python bench/scale.py [--nodes 4,16,64,128] [--hang-timeout 30] [--launcher srun|torchrun]

--launcher torchrun (the rows at 16 and 32 nodes): a torchrun agent per node starts the same rank
program; each agent imports torch (about 250 MB), which is what bounds the node count here.

Needs root (it restarts tests/localcluster.sh at each size, and brings back the layout that was
up, else leaves it down). tests/e2e/test_scale.py runs the 16-node line in the suite.
"""
from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from slurmgen.job import hangs  # noqa: E402
from tests import slurm_helpers  # noqa: E402
from tests.dir_events import DirEvents  # noqa: E402

CLUSTER = REPO / "tests" / "localcluster.sh"
CLUSTER_DIR = Path(os.environ.get("SLURMGEN_CLUSTER_DIR", "/tmp/slurmgen-cluster"))
BIN = Path(sys.executable).parent
STEP_SECONDS = 0.5
PROBE = """
import os, sys, time
from train import heartbeat
heartbeat.install()
rank, marks = heartbeat.rank(), sys.argv[1]
with open(os.path.join(marks, "start-" + rank), "w") as fh:
    fh.write("%.3f" % time.time())
fail, stop, step = os.environ.get("PROBE_FAIL_RANK") == rank, os.environ["SLURMGEN_STOP_FILE"], 0
while not os.path.exists(stop):
    step += 1
    heartbeat.beat(step)
    if fail and step == 5:
        with open(os.path.join(marks, "failed"), "w") as fh:
            fh.write("%.3f" % time.time())
        sys.exit(1)
    time.sleep({step_seconds})
"""


def cluster_up(nodes: int) -> None:
    gpus = ",".join("8" if i % 2 == 0 else "4" for i in range(nodes))
    subprocess.run(["bash", str(CLUSTER), "down"], check=True, capture_output=True)
    up = subprocess.run(["bash", str(CLUSTER), "up", "--gpus", gpus, "--mem", "64000"], capture_output=True,
                        text=True, env=dict(os.environ, SLURMGEN_CLUSTER_TIMEOUT="300"))
    if up.returncode:
        raise SystemExit(f"localcluster up with {nodes} nodes failed:\n{up.stdout}{up.stderr}")


LAUNCHER = {"launcher": "srun"}  # --launcher


def submit(work: Path, nodes: int, hang_timeout: int, *extra: str) -> tuple[str, Path]:
    """Render and submit the probe job; returns its id and the folder where ranks leave marks."""
    marks = Path(tempfile.mkdtemp(prefix="marks-", dir=work))
    probe = work / "probe.py"
    probe.write_text(PROBE.format(step_seconds=STEP_SECONDS))
    script = marks / "job.sh"
    layout = ",".join("2" if i % 2 == 0 else "1" for i in range(nodes))
    subprocess.run([str(BIN / "slurmgen"), "render", "-o", str(script), "--nodes", str(nodes), "--gpus", layout,
                    "--launcher", LAUNCHER["launcher"], "--script", str(probe), "--log-dir", str(marks / "logs"),
                    "--cpus-per-gpu", "1", "--mem-per-gpu", "200M" if LAUNCHER["launcher"] == "srun" else "1G",
                    "--hang-timeout", str(hang_timeout),
                    "--max-failures", "0", "--no-net-check", "--setup", f"source {BIN / 'activate'}", *extra, "--", str(marks)],
                   check=True, capture_output=True, text=True, cwd=work)
    return slurm_helpers.submit(script, cwd=work), marks


def runtime_pid(job: str) -> int | None:
    """The job runtime's process (python -m slurmgen.job --job JOB): the nodes share one PID namespace."""
    for entry in os.listdir("/proc"):
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"slurmgen.job" in argv and job.encode() in argv and b"--job" in argv:
            return int(entry)
    return None


def usage(pid: int) -> tuple[float, float]:
    """(peak resident MB, CPU seconds) of a process, or raises OSError once it is gone."""
    status = Path(f"/proc/{pid}/status").read_text()
    peak = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:")) / 1024
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return peak, (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_until(what: str, check, timeout: float, poll: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(poll)
    raise SystemExit(f"bench/scale.py: {what} not within {timeout:g} s")


def batch_launched(job: str) -> float:
    """When the batch node's slurmd launched the batch script, to the millisecond (its log line);
    Slurm's StartTime counts whole seconds, as much as the whole start at 4 nodes."""
    log = CLUSTER_DIR / "log" / "slurmd-node1.log"
    for line in log.read_text(errors="replace").splitlines():
        if f"] Launching batch job {job} " in line:
            return time.mktime(time.strptime(line[1:20], "%Y-%m-%dT%H:%M:%S")) + float(line[20:24])
    raise SystemExit(f"bench/scale.py: no 'Launching batch job {job}' in {log}")


def log_of(marks: Path) -> str:
    return "".join(p.read_text(errors="replace") for p in (marks / "logs").glob("*.out"))


def hung_job(work: Path, nodes: int, hang_timeout: int) -> dict:
    """Start, preflight, file operations per step, then a stopped rank named; the runtime's usage."""
    ranks = nodes // 2 * 3 + nodes % 2 * 2
    job, marks = submit(work, nodes, hang_timeout)
    beats = marks / "logs" / f".slurmgen-{job}" / "beats"
    wait_until("every rank running", lambda: len(list(marks.glob("start-*"))) == ranks or None, 600)
    info = slurm_helpers.job_info(job)
    began = slurm_helpers.slurm_time(info["StartTime"])
    last = max(float(p.read_text()) for p in marks.glob("start-*"))
    running, from_batch = last - began, last - batch_launched(job)
    pid = runtime_pid(job)
    peak = cpu = 0.0
    # ops per step: 10 s of beats, once every rank's first publication is in
    wait_until("every rank's beat", lambda: len(hangs.read_beats(beats)) == ranks or None, 60)
    ops = DirEvents(beats)
    first = min(b.step for b in hangs.read_beats(beats).values())
    time.sleep(10)
    steps = min(b.step for b in hangs.read_beats(beats).values()) - first
    per_step = len(ops.drain()) / max(steps, 1)
    # one rank on the last node stopped
    victim = max(r for r, b in hangs.read_beats(beats).items() if b.host == f"node{nodes}")
    os.kill(hangs.read_beats(beats)[victim].pid, signal.SIGSTOP)
    stopped = time.time()
    report = marks / "logs" / f"hang-report-{job}.txt"
    while not slurm_helpers.is_finished(slurm_helpers.job_info(job)):
        if pid:
            try:
                peak, cpu = usage(pid)
            except OSError:
                pid = None
        time.sleep(0.5)
    if not report.exists() or f"rank {victim} on node{nodes}" not in report.read_text():
        raise SystemExit(f"bench/scale.py: the hang report does not name rank {victim}:\n{log_of(marks)[-3000:]}")
    preflight = next((line.split(" took ")[1].split()[0] for line in log_of(marks).splitlines()
                      if line.startswith("slurmgen: preflight of ")), "?")
    return {"start": running, "from_batch": from_batch, "preflight": preflight, "hang": report.stat().st_mtime - stopped,
            "report": report.stat().st_size, "peak_mb": peak, "cpu_s": cpu, "ops_per_step": per_step,
            "ranks": ranks}


def failed_job(work: Path, nodes: int, hang_timeout: int) -> float:
    """Seconds from one rank's exit 1 to the job ending FAILED."""
    job, marks = submit(work, nodes, hang_timeout, "--env", f"PROBE_FAIL_RANK={nodes // 2 * 3 - 1}")
    failed = marks / "failed"
    wait_until("the failing rank", failed.exists, 600)
    info = wait_until("the job's end", lambda: (lambda i: i if slurm_helpers.is_finished(i) else None)(
        slurm_helpers.job_info(job)), 300, poll=0.1)
    ended = time.time()
    if info["JobState"] != "FAILED":
        raise SystemExit(f"bench/scale.py: job {job} ended {info['JobState']}, not FAILED:\n{log_of(marks)[-3000:]}")
    return ended - float(failed.read_text())


def measure(nodes: int, hang_timeout: int, work: Path) -> dict:
    cluster_up(nodes)
    row = hung_job(work, nodes, hang_timeout)
    row["fail"] = failed_job(work, nodes, hang_timeout)
    row["nodes"] = nodes
    return row


HEADER = ("nodes", "ranks", "start s", "from batch s", "preflight s", "fail s", "hang s", "report KB", "runtime MB", "runtime CPU s",
          "ops/step", "ops/step/node")


def line(row: dict) -> str:
    cells = (row["nodes"] if LAUNCHER["launcher"] == "srun" else f"{row['nodes']} (torchrun)", row["ranks"], f"{row['start']:.1f}", f"{row['from_batch']:.1f}", row["preflight"], f"{row['fail']:.1f}",
             f"{row['hang']:.1f}", f"{row['report'] / 1024:.1f}", f"{row['peak_mb']:.0f}", f"{row['cpu_s']:.1f}",
             f"{row['ops_per_step']:.1f}", f"{row['ops_per_step'] / row['nodes']:.2f}")
    return "| " + " | ".join(map(str, cells)) + " |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", default="4,16,64,128")
    parser.add_argument("--hang-timeout", type=int, default=30)
    parser.add_argument("--launcher", choices=("srun", "torchrun"), default="srun")
    args = parser.parse_args()
    LAUNCHER["launcher"] = args.launcher
    layout = CLUSTER_DIR / "layout"
    before = dict(l.split("=", 1) for l in layout.read_text().splitlines() if "=" in l) \
        if slurm_helpers.cluster_available()[0] else None
    print("| " + " | ".join(HEADER) + " |\n|" + "---|" * len(HEADER), flush=True)
    try:
        with tempfile.TemporaryDirectory(prefix="slurmgen-scale-", dir="/tmp") as work:
            os.chmod(work, 0o755)
            for nodes in map(int, args.nodes.split(",")):
                print(line(measure(nodes, args.hang_timeout, Path(work))), flush=True)
    finally:
        subprocess.run(["bash", str(CLUSTER), "down"], capture_output=True)
        if before:
            subprocess.run(["bash", str(CLUSTER), "up", "--gpus", before["GPUS"].replace(" ", ","),
                            "--slurm", before.get("SLURM", "system") or "system"], capture_output=True)


if __name__ == "__main__":
    main()
