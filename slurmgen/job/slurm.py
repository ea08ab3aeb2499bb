"""What the job runtime asks of Slurm and does to a running job: the job's nodes and settings, nodes
Slurm will not use, host names to node names, requeue, exclusion and signals (scontrol, scancel)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Optional

from slurmgen.site import cluster

# A node is lost to a running job when Slurm says it is down or has stopped answering (scontrol's
# State= words). A drain (a reboot asked for, a health check) is not: Slurm lets the jobs on a
# draining node run to their end, and only a later job is kept off it.
_LOST_STATES = ("DOWN", "NOT_RESPONDING")


def _scontrol(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["scontrol", *args], capture_output=True, text=True, timeout=60)


def expand(names: str) -> list[str]:
    import hostlist
    return hostlist.expand_hostlist(names) if names and names != "(null)" else []


@dataclass(frozen=True)
class JobInfo:
    """The leader's fields of `scontrol show job`, with every het component's nodes and pins."""
    nodes: list[str] = field(default_factory=list)
    pinned: list[str] = field(default_factory=list)  # ReqNodeList: --nodelist, --gpus auto
    user_excluded: list[str] = field(default_factory=list)  # ExcNodeList the user gave
    partition: str = ""
    log: str = ""  # the job log's path
    preempted: bool = False
    cancelled: bool = False  # scancel: the user's decision, final (Slurm says CANCELLED at once, then TERMs all)


def job_info(job: str, files=None) -> JobInfo:
    """files: the job's folder (record.JobFiles), whose cancel mark counts as Slurm's word (marked)."""
    from slurmgen.site.jobs import job_records

    records = job_records(job)
    if not records:
        return marked(JobInfo(), files)
    nodes = [n for r in records for n in expand(r.get("NodeList", ""))]
    pinned = [n for r in records for n in expand(r.get("ReqNodeList", ""))]
    # Slurm adds to each het component's ExcNodeList the nodes pinned to the others.
    user = [n for n in expand(records[0].get("ExcNodeList", "")) if n not in pinned]
    # 25.11 leaves StdErr empty when it is the same file as StdOut (22.05 repeats it)
    log = records[0].get("StdErr") or records[0].get("StdOut", "")
    preempted = records[0].get("PreemptTime", "")[:1].isdigit()  # a date once Slurm preempts it
    cancelled = was_cancelled(records[0])
    partitions = ",".join(dict.fromkeys(r.get("Partition", "") for r in records))  # each component's
    return marked(JobInfo(nodes, pinned, user, partitions, log, preempted, cancelled), files)


def marked(info: JobInfo, files) -> JobInfo:
    """The one reading of a cancel: Slurm's (was_cancelled), or the job folder's mark, which `slurmgen
    cancel` writes before its scancel: a requeue the job's side decides in between is refused too."""
    if files is None or not files.cancel_mark():
        return info
    from dataclasses import replace

    return replace(info, cancelled=True)


def was_cancelled(record: dict) -> bool:
    """Whether the job was cancelled (scancel). Until its last process ends Slurm says COMPLETING,
    which hides why it ends (22.05 to 25.11 alike); its EndTime then is the moment it was ended,
    where a running job's is its time limit's end (or Unknown): ended before the limit, and not
    preempted, it was cancelled."""
    state = record.get("JobState", "")
    if state.startswith("CANCELLED"):
        return True
    if state != "COMPLETING" or record.get("PreemptTime", "")[:1].isdigit():
        return False
    start, end = _moment(record.get("StartTime", "")), _moment(record.get("EndTime", ""))
    if start is None or end is None:
        return False
    text = record.get("TimeLimit", "")
    if text in ("UNLIMITED", "INFINITE"):
        return True
    limit = _limit_seconds(text)
    return limit is not None and end < start + limit - 5  # a few seconds: Slurm's own rounding at the limit


def _limit_seconds(text: str) -> Optional[float]:
    """scontrol's TimeLimit ([D-]HH:MM:SS) in seconds; None for anything else."""
    days, _, clock = text.rpartition("-")
    parts = clock.split(":")
    if not all(p.isdigit() for p in [*parts, *([days] if days else [])]) or len(parts) != 3:
        return None
    return int(days or 0) * 86400 + int(parts[0]) * 3600 + int(parts[1]) * 60 + int(parts[2])


def _moment(text: str) -> Optional[float]:
    """scontrol's local time (2026-12-06T05:20:38) as seconds, to compare with another; None if none."""
    try:
        return time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return None


def lost_nodes(names: list[str]) -> dict[str, str]:
    """Of these nodes, those lost to the job: name -> state (one scontrol call)."""
    wanted, out = set(names), {}
    if not wanted:
        return out
    for line in _scontrol("show", "node", "-o").stdout.splitlines():
        fields = dict(t.partition("=")[::2] for t in line.split() if "=" in t)
        name, state = fields.get("NodeName", ""), fields.get("State", "")
        if name in wanted and is_lost(state):
            out[name] = state
    return out


def is_lost(state: str) -> bool:
    """Whether a node of this State= is lost: DOWN or NOT_RESPONDING in it (a * after a word: not responding)."""
    words = state.split("+")
    return any(w.rstrip("*") in _LOST_STATES or w.endswith("*") for w in words)


def node_name(host: str, nodes: list[str]) -> str:
    """Slurm's NodeName for a host name as a rank or torchrun reports it (the host name, its FQDN,
    or an address), among the job's nodes (none given: all nodes): what ExcNodeList and the blame
    count need. On many sites the two differ (gpu012.cluster.example is gpu012). The host itself
    when nothing matches."""
    if not host or host in nodes:
        return host
    short = host.split(".")[0]
    if short in nodes:
        return short
    for line in _scontrol("show", "node", "-o", *([",".join(nodes)] if nodes else [])).stdout.splitlines():
        fields = dict(t.partition("=")[::2] for t in line.split() if "=" in t)
        names = {fields.get("NodeHostName", ""), fields.get("NodeAddr", "")}
        if host in names or short in {n.split(".")[0] for n in names if n}:
            return fields.get("NodeName", host)
    return host


def fits_without(layout, partition: str, excluded: list[str]) -> bool:
    """Whether the partition (default: the cluster's default one; a het job's components may name
    several, comma-separated: their nodes together) can hold the layout without the excluded nodes
    and those Slurm will not use."""
    from slurmgen.job.retry import layout_fits

    info = cluster.query()
    partitions = set((partition or info.default_partition).split(","))
    caps = {n.name: n.gpus for n in info.nodes if n.usable and n.name not in excluded and n.partition in partitions}
    return layout_fits(layout, list(caps.values()))


def requeue(job: str) -> bool:
    """Requeue the job, if it still runs (Incomplete: a job the user cancelled meanwhile stays cancelled).
    Its TERM reaches this process and every scontrol it starts (the batch step's processes): from here
    on TERM is ignored, which they inherit, so the exclusion that follows is made (the job ends anyway;
    Slurm KILLs what is left KillWait s later)."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    return _scontrol("requeue", "Incomplete", job).returncode == 0


def exclude(job: str, names: list[str], settle: float = 3.0) -> None:
    """Leave these nodes out of the requeued job's next run. Pinned nodes (--nodelist, --gpus auto;
    and 22.05 pins each het component to its old nodes as it requeues them, one after the other)
    among them leave their component's pins (ReqNodeList), which Slurm would otherwise refuse to
    combine with the exclusion, or never meet; Slurm then picks another node for that place. Pins
    are looked for again for ``settle`` s, for a component requeued after the exclusion."""
    import hostlist

    _unpin(job, names)
    text = hostlist.collect_hostlist(sorted(names))
    done = _scontrol("update", f"JobId={job}", f"ExcNodeList={text}")
    if done.returncode != 0:
        _warn(f"could not exclude {text}: {done.stderr.strip()}")
    deadline = time.monotonic() + settle
    while time.monotonic() < deadline:
        time.sleep(0.25)
        _unpin(job, names)


def _unpin(job: str, names: list[str]) -> None:
    import hostlist
    from slurmgen.site.jobs import job_records

    for record in job_records(job):
        pins = expand(record.get("ReqNodeList", ""))
        keep = [n for n in pins if n not in names]
        if len(keep) == len(pins):
            continue
        target = record.get("JobId", job)  # a het component's own id ("J+1" is refused here)
        done = _scontrol("update", f"JobId={target}", f"ReqNodeList={hostlist.collect_hostlist(keep) if keep else ''}")
        if done.returncode != 0:
            _warn(f"could not drop {','.join(sorted(set(pins) - set(keep)))} from the nodes job {target} is"
                  f" pinned to: {done.stderr.strip()}")


def signal_steps(job: str) -> bool:
    """TERM to every task of the job's steps (not the batch script; to srun it cancels a het job
    from 23.02). False where no controller answers."""
    return subprocess.run(["scancel", "--signal=TERM", job], capture_output=True).returncode == 0


def kill_steps(job: str) -> None:
    """KILL to every task of the job's steps, step by step: KILL sent to the job itself would end it.
    A het job's steps carry their component's job id (J+1's are J1.N), which squeue -s -j needs."""
    from slurmgen.site.jobs import job_records

    ids = ",".join(r.get("JobId", "") for r in job_records(job) if r.get("JobId")) or job
    listed = subprocess.run(["squeue", "-h", "-s", "-j", ids, "-o", "%i"], capture_output=True, text=True, timeout=60)
    steps = [s for s in listed.stdout.split() if s.rpartition(".")[2].isdigit()]  # not .batch, .extern
    if steps:
        subprocess.run(["scancel", "--signal=KILL", *steps], capture_output=True, timeout=60)


LOG_TAIL = 16 * 2**20  # the end of a failed run: its failures are reported last (every node's in a few KB)


def read_log(path: str, tail: int = LOG_TAIL) -> str:
    """A file's last `tail` bytes ("" when it cannot be read): a job log, whose ranks may have
    written gigabytes, or a long run's progress.jsonl, which `slurmgen watch` reads every second."""
    try:
        with open(path, "rb") as log:
            log.seek(max(0, log.seek(0, 2) - tail))
            return log.read().decode(errors="replace")
    except OSError:
        return ""


def _warn(text: str) -> None:
    print(f"slurmgen: {text}", file=sys.stderr, flush=True)
