"""Small helpers for tests that run real jobs on a Slurm cluster (tests/localcluster.sh).

Standard library only. Jobs are submitted with ``sbatch --parsable`` and followed by polling
``scontrol show job -o`` every half second: ``sbatch --wait`` polls with a growing interval and
returned 30 s late for short jobs.

    ok, reason = cluster_available()
    job_id = submit("job.sh", "--nodes=2", cwd=workdir)
    result = wait_job(job_id, timeout=120)
    assert result["State"] == "COMPLETED", result
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple, Union

TERMINAL_STATES = frozenset({
    "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED",
    "BOOT_FAIL", "DEADLINE",
})
#: node states in which a node can take (or is running) jobs; sinfo adds "*" etc. when it cannot
HEALTHY_NODE_STATES = frozenset({"idle", "mixed", "allocated", "completing", "planned"})
POLL_INTERVAL = 0.5
_CONF_PATHS = ("/etc/slurm/slurm.conf", "/etc/slurm-llnl/slurm.conf", "/usr/local/etc/slurm.conf")

JobId = Union[int, str]

# A key starts a field: a space (or the start) then Name= ; Slurm keys hold letters, digits and
# a few of _ : / - (e.g. "ReqB:S:C:T=", "CPUs/Task=", "TresPerNode="). Values may hold spaces
# (Comment=, Reason=, Command= with spaces): they run up to the next key.
_KEY = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9_:/\-]*)=")


def _run(args: List[str], timeout: float = 30, cwd=None, env=None) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env)


def parse_kv(line: str) -> Dict[str, str]:
    """Parse one line of ``scontrol show ... -o`` output into a dict (values kept as text).

    A key that appears twice keeps its first value (scontrol repeats none that matter)."""
    line = line.strip()
    matches = list(_KEY.finditer(line))
    out: Dict[str, str] = {}
    for i, m in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(line)
        out.setdefault(m.group(1), line[m.end():end].strip())
    return out


def cluster_available() -> Tuple[bool, str]:
    """(True, summary) when ``sinfo`` answers and lists nodes that can run jobs, else (False, reason)."""
    if shutil.which("sinfo") is None:
        return False, "sinfo not found (as root: tests/localcluster.sh install && tests/localcluster.sh up)"
    conf = os.environ.get("SLURM_CONF")
    if conf and not os.path.exists(conf):
        return False, f"SLURM_CONF={conf} does not exist"
    # Without a config file sinfo looks for a configless controller and hangs ~20 s: look briefly.
    has_conf = bool(conf) or any(os.path.exists(p) for p in _CONF_PATHS)
    limit = 20 if has_conf else 5
    try:
        proc = _run(["sinfo", "-h", "-N", "-o", "%N %T"], timeout=limit)
    except subprocess.TimeoutExpired:
        if not has_conf:
            return False, ("no slurm.conf (" + ", ".join(_CONF_PATHS) + ") and no configless controller "
                           "answered (as root: tests/localcluster.sh up)")
        return False, f"sinfo timed out after {limit} s (is slurmctld up? tests/localcluster.sh status)"
    if proc.returncode != 0:
        msg = (proc.stderr or proc.stdout).strip().splitlines()
        return False, f"sinfo failed: {msg[-1] if msg else proc.returncode} (tests/localcluster.sh up)"
    nodes: Dict[str, str] = {}
    for row in proc.stdout.splitlines():
        parts = row.split()
        if len(parts) >= 2:
            nodes[parts[0]] = parts[1]
    if not nodes:
        return False, "sinfo lists no nodes"
    # A trailing "-" (planned for a pending job), "$" (reservation), "@"/"^" (reboot) leave a node
    # usable; "*" (not responding), "~"/"#"/"%"/"!" (power states) do not.
    bad = {n: s for n, s in nodes.items() if s.rstrip("-$@^+") not in HEALTHY_NODE_STATES}
    if bad:
        listing = ", ".join(f"{n}={s}" for n, s in sorted(bad.items()))
        return False, f"nodes not usable: {listing} (tests/localcluster.sh status)"
    return True, f"{len(nodes)} nodes: " + ", ".join(f"{n}={s}" for n, s in sorted(nodes.items()))


def node_address(node: str) -> str:
    """The node's address as Slurm knows it (its NodeAddr): what a job on it resolves its name to.
    Not this machine's /etc/hosts: a second local cluster beside the first has the same node names."""
    out = _run(["scontrol", "show", "node", node, "-o"]).stdout
    return parse_kv(out.strip())["NodeAddr"]


def submit(script_path: Union[str, Path], *sbatch_args: str, cwd=None, env=None) -> str:
    """``sbatch --parsable [ARGS] SCRIPT`` (from a shell with env, where given: sbatch exports it to the
    job); returns the job id (text, e.g. "42").

    Raises RuntimeError with sbatch's message when the submission is refused."""
    cmd = ["sbatch", "--parsable", *map(str, sbatch_args), str(script_path)]
    proc = _run(cmd, timeout=60, cwd=cwd, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()}")
    first = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    job_id = first.split(";")[0].strip()  # "ID" or "ID;cluster"
    if not job_id.isdigit():
        raise RuntimeError(f"sbatch --parsable printed {proc.stdout!r}, not a job id")
    return job_id


def _show_job(job_id: JobId) -> Tuple[int, str]:
    proc = _run(["scontrol", "show", "job", "-o", str(job_id)], timeout=30)
    return proc.returncode, (proc.stdout if proc.returncode == 0 else proc.stderr)


def show_job_text(job_id: JobId) -> str:
    """``scontrol show job JOB`` as people read it (for error messages)."""
    try:
        proc = _run(["scontrol", "show", "job", str(job_id)], timeout=30)
        return (proc.stdout + proc.stderr).strip()
    except subprocess.TimeoutExpired:
        return "scontrol show job timed out"


def job_info(job_id: JobId) -> Dict:
    """``scontrol show job -o JOB`` parsed into a dict of Slurm's keys (values are strings).

    For a het job scontrol prints one record per component; the dict is the leader's record
    (HetJobOffset=0), and ``info["components"]`` lists every record in offset order (for an
    ordinary job it holds the one record). Raises LookupError when Slurm does not know the job."""
    rc, text = _show_job(job_id)
    if rc != 0:
        raise LookupError(f"scontrol show job {job_id}: {text.strip()}")
    records = [parse_kv(line) for line in text.splitlines() if "JobId=" in line]
    if not records:
        raise LookupError(f"scontrol show job {job_id}: no record in {text!r}")
    records.sort(key=lambda r: int(r.get("HetJobOffset", "0") or 0))
    leader = dict(records[0])
    leader["components"] = records
    return leader


def _summary(info: Dict) -> Dict:
    comps = info["components"]
    result = dict(info)
    result.update({
        "job_id": info.get("HetJobId") or info.get("JobId"),
        "State": info.get("JobState", ""),
        "ExitCode": info.get("ExitCode", ""),
        "het": len(comps) > 1 or "HetJobId" in info,
        "component_states": [c.get("JobState", "") for c in comps],
        "Components": [{
            "JobId": c.get("JobId"), "HetJobOffset": c.get("HetJobOffset", "0"),
            "State": c.get("JobState", ""), "ExitCode": c.get("ExitCode", ""),
            "NodeList": c.get("NodeList", ""), "Restarts": c.get("Restarts", "0"),
        } for c in comps],
    })
    return result


def is_finished(info: Dict) -> bool:
    """True when the job (every component of a het job) is in a terminal state."""
    return all(c.get("JobState", "") in TERMINAL_STATES for c in info["components"])


def wait_job(job_id: JobId, timeout: float = 300, poll: float = POLL_INTERVAL) -> Dict:
    """Poll ``scontrol show job -o`` every ``poll`` s until the job (all its het components) ends.

    Returns the leader's record (every scontrol key) plus: ``State`` (final JobState), ``ExitCode``,
    ``job_id``, ``het``, ``component_states`` and ``Components`` (per component JobId,
    HetJobOffset, State, ExitCode, NodeList, Restarts). Raises TimeoutError with the
    ``scontrol show job`` text when it has not ended after ``timeout`` seconds. A requeued job
    (PENDING again) is waited for; see ``nudge``."""
    deadline = time.monotonic() + timeout
    info = None
    while True:
        try:
            info = job_info(job_id)
        except (LookupError, subprocess.TimeoutExpired):
            info = None  # slurmctld busy for a moment; try again until the deadline
        if info is not None and is_finished(info):
            return _summary(info)
        if time.monotonic() >= deadline:
            states = info and [c.get("JobState") for c in info["components"]]
            raise TimeoutError(f"job {job_id} not finished after {timeout:g} s (states {states}):\n"
                               f"{show_job_text(job_id)}")
        time.sleep(poll)


def wait_state(job_id: JobId, predicate, timeout: float = 60, poll: float = 0.2) -> Dict:
    """Poll until ``predicate(job_info(job_id))`` is true; returns that info or raises TimeoutError."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            info = job_info(job_id)
            if predicate(info):
                return info
        except LookupError:
            pass
        if time.monotonic() >= deadline:
            raise TimeoutError(f"job {job_id}: condition not met after {timeout:g} s:\n{show_job_text(job_id)}")
        time.sleep(poll)


def nudge(job_id: JobId) -> bool:
    """``scontrol update jobid=JOB StartTime=now``: for a requeued job, which Slurm holds for about
    two minutes (EligibleTime) and which, on an idle cluster, the backfill scheduler (the only one
    that starts het jobs) does not look at again until something changes. Tests only: the product
    must not need this. Returns False when Slurm refused (e.g. the job is no longer pending)."""
    proc = _run(["scontrol", "update", f"jobid={job_id}", "StartTime=now"], timeout=30)
    return proc.returncode == 0


# slurmd refuses a launch credential issued in the same second as the job's requeue ("Job
# credential revoked": the job then FAILS), which is why Slurm holds a requeued job. A nudge this
# many seconds after the requeue (SubmitTime is reset to it) is safe.
NUDGE_AFTER = 3


def slurm_time(text: str) -> float:
    """Seconds since the epoch for a Slurm timestamp (local time, as scontrol prints it)."""
    return time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))


def requeue_is_old(info: Dict, seen_since: float) -> bool:
    """Whether a requeued job's requeue is NUDGE_AFTER seconds old, by Slurm's clock (SubmitTime
    is reset to it; every het component's, which Slurm requeues one after the other) and by ours
    since ``seen_since`` (monotonic; for an instant after a requeue SubmitTime can still be the old
    one: a nudge 3 ms after one failed the job)."""
    submitted = max(slurm_time(c["SubmitTime"]) for c in info.get("components") or [info])
    return time.monotonic() - seen_since > NUDGE_AFTER and time.time() > submitted + NUDGE_AFTER


class RequeueNudger:
    """Given each poll of a job (job_info), ``nudge``s it while a requeue leaves it PENDING, once
    that requeue is old enough (``requeue_is_old``) and at most every 2 s."""

    def __init__(self, job_id: JobId):
        self.job_id, self.last = job_id, 0.0
        self.pending_since: Dict[str, float] = {}  # first seen pending, per restart count

    def __call__(self, info: Dict) -> None:
        restarts = info.get("Restarts", "0") or "0"
        if int(restarts) < 1 or not any(c.get("JobState") == "PENDING" for c in info["components"]):
            return
        since = self.pending_since.setdefault(restarts, time.monotonic())
        if requeue_is_old(info, since) and time.monotonic() - self.last > 2:
            nudge(self.job_id)
            self.last = time.monotonic()


def nudge_requeued(job_id: JobId, timeout: float = 30) -> bool:
    """``nudge`` a requeued (PENDING) job once ``requeue_is_old``."""
    seen_since = time.monotonic()
    deadline = seen_since + timeout
    while time.monotonic() < deadline:
        if requeue_is_old(job_info(job_id), seen_since):
            return nudge(job_id)
        time.sleep(0.2)
    return False


def cancel(job_id: JobId) -> None:
    """``scancel JOB`` (errors ignored: the job may have ended)."""
    _run(["scancel", str(job_id)], timeout=30)


def drain(node: str, reason: str = "slurmgen-test", timeout: float = 60) -> None:
    """Drain an idle node: first wait until it is idle (a job of an earlier test may still be
    completing there, and the node would read "draining"), then until Slurm says drained."""
    import time

    def state() -> str:
        out = _run(["sinfo", "-h", "-n", node, "-o", "%T"], timeout=30).stdout.split()
        return out[0] if out else ""

    deadline = time.monotonic() + timeout
    while state() != "idle" and time.monotonic() < deadline:
        time.sleep(0.5)
    _run(["scontrol", "update", f"nodename={node}", "state=drain", f"reason={reason}"], timeout=30)
    while state() != "drained" and time.monotonic() < deadline:
        time.sleep(0.5)


def release(job_id: JobId) -> None:
    """``scontrol release JOB``: a job submitted with --hold may start."""
    _run(["scontrol", "release", str(job_id)], timeout=30)


def drain_now(node: str, reason: str) -> None:
    """Drain a node that runs jobs (DRAINING: they run to their end; only later jobs are kept off)."""
    _run(["scontrol", "update", f"nodename={node}", "state=drain", f"reason={reason}"], timeout=30)


def resume_node(node: str) -> None:
    """Back in service after a drain."""
    _run(["scontrol", "update", f"nodename={node}", "state=resume"], timeout=30)
