"""Failures and bad nodes: `python -m slurmgen.job.retry`, called by the batch script.

A failure is a hang (slurmgen.job.hangs), a crashed rank, or a run that ended without the script
(Slurm killed it: a node went down). Failures are counted per job in a small JSON file beside the
log, apart from time-limit restarts and preemptions, up to --max-failures. A failure that points at
one node gets that node excluded from the requeued job (ExcNodeList): at once for a node Slurm
marks down or drained and for a node whose software differs (preflight), after the second failure
there for a hung or crashed rank (once may be the code, twice on one node is the node). When the layout can no longer be met without the excluded
nodes, the job says so and ends instead of pending for ever.

    python -m slurmgen.job.retry begin STATE_FILE MAX_FAILURES LAYOUT
        at the start of every run: a previous run that never ended is a failure
    python -m slurmgen.job.retry failed STATE_FILE MAX_FAILURES LAYOUT WHY [NODE]
        after the monitor stopped a failed run: count it, exclude, requeue (exit 0) or not (1)

LAYOUT is GPUS:NODES per component, e.g. 1:2,2:2 for 1,1,2,2.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

from slurmgen.site import cluster

# Where Slurm puts a node that it will not give a job (scontrol's State= words).
_BAD_STATES = ("DOWN", "DRAIN", "FAIL", "NOT_RESPONDING", "INVAL")
# Failures that are the node's, not the training's: its node is excluded at once.
NODE_LEVEL = ("node", "preflight")
STOP = 1  # exit status: end the job (the script then exits with the failure's own status)
TOO_MANY = 3  # begin's: end the job (not 1, which is also a python that cannot import slurmgen)


def load(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {"failures": [], "excluded": []}


def save(path: Path, state: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(state))
    os.replace(tmp, path)


def parse_layout(text: str) -> list[tuple[int, int]]:
    return [(int(g), int(n)) for g, n in (part.split(":") for part in text.split(","))]


def to_exclude(failures: list[dict], bad_now: list[str]) -> list[str]:
    """Nodes a retry should avoid: bad in Slurm's eyes now, or blamed for two failures."""
    blamed = Counter(f["node"] for f in failures if f.get("node") and f["why"] not in NODE_LEVEL)
    node_failures = {f["node"] for f in failures if f.get("node") and f["why"] in NODE_LEVEL}
    return sorted(set(bad_now) | node_failures | {n for n, count in blamed.items() if count >= 2})


def layout_fits(layout: list[tuple[int, int]], capacities: list[int]) -> bool:
    """Whether nodes with these GPU counts can hold the components (GPUs per node, nodes). Nodes
    with at least g GPUs are nested sets, so it is enough that for every g the nodes with >= g
    GPUs outnumber the component nodes that need >= g."""
    for g in {g for g, _ in layout}:
        need = sum(n for gg, n in layout if gg >= g)
        if sum(1 for c in capacities if c >= g) < need:
            return False
    return True


def _scontrol(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["scontrol", *args], capture_output=True, text=True, timeout=60)


def _job_fields(job: str) -> dict:
    """The leader's fields of `scontrol show job -o`; NodeList joins every het component's, and
    ReqNodeList every component's pins."""
    from slurmgen.site.jobs import job_records

    records = job_records(job)
    if not records:
        return {}
    nodes = [r["NodeList"] for r in records if r.get("NodeList") not in (None, "", "(null)")]
    pins = [r["ReqNodeList"] for r in records if r.get("ReqNodeList") not in (None, "", "(null)")]
    return {**records[0], "NodeList": ",".join(nodes), "ReqNodeList": ",".join(pins)}


def _expand(names: str) -> list[str]:
    import hostlist
    return hostlist.expand_hostlist(names) if names and names != "(null)" else []


def bad_nodes(names: list[str]) -> dict[str, str]:
    """Of these nodes, those Slurm will not use now: name -> state (one scontrol call)."""
    wanted, out = set(names), {}
    if not wanted:
        return out
    for line in _scontrol("show", "node", "-o").stdout.splitlines():
        fields = dict(t.partition("=")[::2] for t in line.split() if "=" in t)
        name, state = fields.get("NodeName", ""), fields.get("State", "")
        if name in wanted and any(word in state for word in _BAD_STATES):
            out[name] = state
    return out


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
    """Whether the partition (default: the cluster's default one) can hold the layout without
    the excluded nodes and those Slurm will not use."""
    info = cluster.query()
    partition = partition or info.default_partition
    caps = [n.gpus for n in info.nodes if n.usable and n.name not in excluded and n.partition == partition]
    return layout_fits(layout, caps)


# torchrun's summary of a failed agent, and srun's line for a failed task.
_ROOT_CAUSE = re.compile(r"Root Cause \(first observed failure\):\s*\n\[\d+\]:\s*\n\s*time\s*:\s*(?P<time>\S+)\s*\n"
                         r"\s*host\s*:\s*(?P<host>\S+)\s*\n\s*rank\s*:.*\n\s*exitcode\s*:\s*(?P<code>-?\d+)")
_SRUN_TASK = re.compile(r"^srun: error: (?P<host>\S+): tasks? [\d,-]+: (?:Exited with exit code (?P<code>\d+)|.*)$", re.M)


def crashed_node(log: str) -> str:
    """The node where the last run's failure began, from the job log ("" when it cannot be told).

    When one rank crashes, the others fail too, from the broken collective: those exit with
    Python's status 1, while the rank that began it mostly does not (a signal, os._exit, an OOM
    kill). So: the earliest failure torchrun reports with another status, else the earliest; with
    --launcher srun, srun's first task that exited with another status than 1. Several nodes in the
    same second: none. The entry points' ranks that fail from a broken collective wait 8 s first
    (train.program.leave_after_the_culprit), so the node where it began is seen first."""
    start = log.rfind("slurmgen: job ")
    log = log[start:] if start >= 0 else log
    causes = [(m["time"], m["host"], m["code"]) for m in _ROOT_CAUSE.finditer(log)]
    if causes:
        odd = [c for c in causes if c[2] != "1"] or causes
        first = min(t for t, _, _ in odd)
        hosts = {h for t, h, _ in odd if t == first}
        return hosts.pop() if len(hosts) == 1 else ""
    tasks = [(m["host"], m["code"]) for m in _SRUN_TASK.finditer(log)]
    odd = [h for h, code in tasks if code not in (None, "1")]
    return odd[0] if odd else ""


def next_exclusion(history: list[dict], exclude, gpus, partition) -> tuple[str, list[str], bool]:
    """For the submit path's retries: the --exclude value (the user's and the nodes to avoid), the
    nodes new in it, and whether the partition can still hold one node per GPU count in gpus."""
    import hostlist
    user = hostlist.expand_hostlist(exclude) if exclude else []
    avoid = to_exclude(history, [])
    new = [n for n in avoid if n not in user]
    names = sorted(set(user) | set(avoid))
    fits = not new or fits_without([(g, 1) for g in gpus], partition or "", names)
    return hostlist.collect_hostlist(names) if names else None, new, fits


def begin(path: Path, max_failures: int, layout) -> int:
    """A run starts: if the previous one never reached its end (Slurm ended it: a node failure),
    count that and remember the node that went bad, for the next requeue."""
    state = load(path)
    running = Path(f"{path}.running")  # the script removes it wherever it ends the run itself
    previous = running.read_text().split() if running.exists() else []
    job = os.environ.get("SLURM_JOB_ID", "")
    gone = bad_nodes(previous)
    if gone:  # not counted otherwise: a run requeued by hand ends without the script too
        node = sorted(gone)[0]
        state["failures"].append({"why": "node", "node": node})
        state["excluded"] = sorted(set(state["excluded"]) | set(gone))
        print(f"slurmgen: the last run of job {job} ended when {node} became {gone[node]}: failure "
              f"{len(state['failures'])} of at most {max_failures}; {node} is left out of later runs",
              flush=True)
        save(path, state)
    lists = [v for k, v in os.environ.items() if k == "SLURM_JOB_NODELIST" or k.startswith("SLURM_JOB_NODELIST_HET_GROUP_")]
    running.write_text(" ".join(sorted({n for v in lists for n in _expand(v)})) + "\n")
    if len(state["failures"]) > max_failures:
        print(f"slurmgen: {len(state['failures'])} failures, more than --max-failures {max_failures}: "
              "not training again", file=sys.stderr, flush=True)
        return TOO_MANY
    return 0


def failed(path: Path, max_failures: int, layout, why: str, node: str) -> int:
    """The monitor stopped a failed run: count it, exclude what it points at, requeue or not."""
    # Our own requeue TERMs every process of the job, this one too, before the ExcNodeList
    # update that must follow it (seen: preflight's requeue lost its exclusion that way).
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    state = load(path)
    Path(f"{path}.running").unlink(missing_ok=True)  # this run ends here, not lost
    job = os.environ.get("SLURM_JOB_ID", "")
    fields = _job_fields(job)
    nodes = _expand(fields.get("NodeList", ""))
    gone = bad_nodes(nodes)
    if gone:
        why, node = "node", sorted(gone)[0]
    elif not node and why == "crash":
        try:
            # 25.11 leaves StdErr empty when it is the same file as StdOut (22.05 repeats it)
            log = fields.get("StdErr") or fields.get("StdOut", "")
            node = crashed_node(Path(log).read_text(errors="replace"))
        except OSError:
            pass
    node = node_name(node, nodes)
    beats = os.environ.get("SLURMGEN_HEARTBEAT_DIR", "")
    if not gone and why != "preflight" and not (beats and any(Path(beats).glob("rank-*"))):
        print("slurmgen: no rank had begun training (train.heartbeat): not retrying a failure"
              " that would most likely happen again", file=sys.stderr, flush=True)
        return STOP
    state["failures"].append({"why": why, "node": node})
    count = len(state["failures"])
    where = f" on {node}" if node else ""
    if count > max_failures:
        save(path, state)
        print(f"slurmgen: failure {count} ({why}{where}): no retry left (--max-failures {max_failures})",
              file=sys.stderr, flush=True)
        return STOP
    excluded = sorted(set(state.get("excluded", [])) | set(to_exclude(state["failures"], list(gone))))
    new = [n for n in excluded if n not in state.get("excluded", [])]
    state["excluded"] = excluded
    save(path, state)
    # The user's own exclusions: Slurm adds to each het component those pinned to the others.
    pinned = _expand(fields.get("ReqNodeList", ""))
    user = [n for n in _expand(fields.get("ExcNodeList", "")) if n not in pinned]
    if new and not fits_without(parse_layout(layout), fields.get("Partition", ""), sorted(set(user) | set(excluded))):
        print(f"slurmgen: failure {count} ({why}{where}); without {','.join(excluded)} the partition cannot "
              f"hold the layout any more: not retrying", file=sys.stderr, flush=True)
        return STOP
    reasons = [f"{n} ({gone[n]})" if n in gone else f"{n} ({why})" if why in NODE_LEVEL and n == node
               else f"{n} (2nd failure there)" for n in new]
    print(f"slurmgen: failure {count} of at most {max_failures} ({why}{where}): requeueing job {job} "
          "to resume from its newest checkpoint"
          + (f"; excluding {', '.join(reasons)}" if reasons else ""), flush=True)
    if _scontrol("requeue", job).returncode != 0:
        print("slurmgen: scontrol requeue failed", file=sys.stderr, flush=True)
        return STOP
    if excluded:
        import hostlist
        unpin(job, excluded)
        names = hostlist.collect_hostlist(sorted(set(user) | set(excluded)))
        done = _scontrol("update", f"JobId={job}", f"ExcNodeList={names}")
        if done.returncode != 0:
            print(f"slurmgen: could not exclude {names}: {done.stderr.strip()}", file=sys.stderr, flush=True)
    return 0


def unpin(job: str, excluded: list[str]) -> None:
    """Pinned nodes (--nodelist, --gpus auto) that are now excluded leave their component's pins
    (ReqNodeList), which Slurm would otherwise refuse to combine with the exclusion, or never meet;
    Slurm then picks another node for that place. (fits_without has checked that one exists.)"""
    import hostlist
    from slurmgen.site.jobs import job_records

    for record in job_records(job):
        pins = _expand(record.get("ReqNodeList", ""))
        keep = [n for n in pins if n not in excluded]
        if len(keep) == len(pins):
            continue
        target = record.get("JobId", job)  # a het component's own id ("J+1" is refused here)
        done = _scontrol("update", f"JobId={target}", f"ReqNodeList={hostlist.collect_hostlist(keep) if keep else ''}")
        if done.returncode != 0:
            print(f"slurmgen: could not drop {','.join(sorted(set(pins) - set(keep)))} from the nodes job {target} is"
                  f" pinned to: {done.stderr.strip()}", file=sys.stderr, flush=True)


def gone() -> int:
    """0 when a node of this job is down or drained now: the warning that stopped the run came
    from a lost node (25.11 signals the batch script), so it is a failure, not a restart."""
    nodes = _expand(_job_fields(os.environ.get("SLURM_JOB_ID", "")).get("NodeList", ""))
    return 0 if bad_nodes(nodes) else 1


def main(argv: list[str]) -> int:
    if argv[:1] == ["gone"]:
        return gone()
    if len(argv) >= 4 and argv[0] == "begin":
        return begin(Path(argv[1]), int(argv[2]), argv[3])
    if len(argv) >= 5 and argv[0] == "failed":
        return failed(Path(argv[1]), int(argv[2]), argv[3], argv[4], argv[5] if len(argv) > 5 else "")
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
