"""The hang watch: a look at the ranks' heartbeats, and on a hang their stacks and a report.

Every rank writes its heartbeat (train.heartbeat: rank, step, time, host, pid) at each step, and
during a checkpoint save the save's allowance (train.saves). When a rank has not advanced for the
hang timeout (while some rank saves: for that save's allowance), the watch asks every rank for its Python stacks
without stopping the job (one `srun --overlap` per component: the faulthandler signal, and py-spy
where the site has it), groups the ranks by where they are, names the odd ones out, appends the
report to hang-report-JOBID.txt beside the job log, prints its summary to the log and returns the
suspect node: the job runtime (slurmgen.job.runtime) then stops the job and retries it, and the
submit path its job. Standard library and python-hostlist only.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from slurmgen import contract
from slurmgen.job.stacks import (RankView, hosts, in_collective, main_thread, parse_threads, ranges,
                                 summarize, where)


DUMP_SIGNAL = contract.DUMP_SIGNAL  # kill's spelling: RTMIN+5
POLL_SECONDS = 5.0
STACK_WAIT_SECONDS = 10.0

# Runs on every node of a component: signal the ranks that beat from this host ("signal"). A
# stopped rank (SIGSTOP, a debugger) takes the signal only once continued ("continue", a second
# round once every other rank has answered: continued earlier, it could let the others move on
# before their stacks are taken); the job is stopped next anyway. py-spy, where installed, reads
# the stack without the rank's help.
_DUMP = r'''
d=$1 mode=$2 h=${SLURMD_NODENAME:-$(hostname)} sig=$4
if [[ -n $3 ]]; then  # where the ranks of this node beat, a folder per part of the job here (train.heartbeat)
    set -- "${TMPDIR:-/tmp}/$3-$h"-*/rank-*
else
    set -- "$d"/rank-*
fi
for f in "$@"; do
    read -r rank _ _ host pid _ < "$f" || continue
    [[ $host == "$h" ]] || continue
    if [[ $mode == continue ]]; then
        [[ $(cat "$d/state-$rank" 2>/dev/null) == T ]] && kill -CONT "$pid"
        continue
    fi
    state=$(awk '{ print $3 }' "/proc/$pid/stat" 2>/dev/null) || state=gone
    echo "${state:-gone}" > "$d/state-$rank"
    [[ $state == gone ]] && continue
    : > "$d/stack-$rank"
    command -v py-spy >/dev/null && timeout 20 py-spy dump --pid "$pid" > "$d/pyspy-$rank" 2>&1
    kill -s "$sig" "$pid"
done
exit 0
'''


@dataclass(frozen=True)
class Beat:
    rank: int
    step: int
    time: float
    host: str
    pid: int
    save_allowance: float = 0.0  # seconds, while this rank is in a checkpoint save
    compute: float = 0.0  # mean compute seconds per step over the straggler window (0: not measured)


def read_beats(folder: Path) -> dict[int, Beat]:
    """Every rank's last beat: its own file (rank-R), or its line in its node's (node-NODE, where
    the ranks beat on their node and one of them publishes; see train/contract.py)."""
    beats = {}
    for pattern in (contract.NODE_BEAT_FILE.format(node="*"), contract.BEAT_FILE.format(rank="*")):
        for path in folder.glob(pattern):
            if path.suffix == ".tmp":
                continue
            try:
                lines = path.read_text().splitlines()
            except OSError:
                continue
            for line in lines:
                try:
                    rank, step, when, host, pid, *extra = line.split()
                    named = dict(zip(extra[::2], map(float, extra[1::2])))  # save ALLOWANCE, compute SECONDS
                    beats[int(rank)] = Beat(int(rank), int(step), float(when), host, int(pid),
                                            named.get("save", 0.0), named.get("compute", 0.0))
                except (ValueError, IndexError):
                    continue  # being replaced right now: read again at the next poll
    return beats


def stuck_ranks(beats: dict[int, Beat], world: int, now: float, timeout: float) -> list[int]:
    """Ranks whose last beat is older than timeout. Nothing counts before the first beat (loading,
    data preparation); a rank that never beat is measured from the first beat of any rank. While
    a rank saves within its allowance nobody is stuck: the others wait for that save."""
    if not beats:
        return []
    if any(now - b.time < max(timeout, b.save_allowance) for b in beats.values() if b.save_allowance):
        return []
    first = min(b.time for b in beats.values())
    last = {r: beats[r].time if r in beats else first for r in range(world)}
    allowed = {r: max(timeout, beats[r].save_allowance) if r in beats else timeout for r in range(world)}
    return sorted(r for r, t in last.items() if now - t >= allowed[r])


def ask_for_stacks(folder: Path, groups: list[tuple], job: Optional[str] = None,
                   mode: str = "signal") -> None:
    """One `srun --overlap` per component into the running job (from outside it: ``job``); each
    signals its node's ranks (mode "signal"), or continues its stopped ones ("continue")."""
    procs = []
    for group, nodes, *named in groups:  # named: the nodes by name (a component on spares)
        het = [f"--het-group={group}"] if group != "-" else []
        het += [f"--jobid={job}"] if job else []
        het += [f"--nodelist={named[0]}"] if named else []
        # --mem=0: where memory is a consumable, the training step holds all of it (checked
        # on 22.05: without it, "Memory required by task is not available")
        cmd = ["srun", "--overlap", *het, f"--nodes={nodes}", f"--ntasks={nodes}",
               "--ntasks-per-node=1", "--cpus-per-task=1", "--mem=0", "--quiet",
               "bash", "-c", _DUMP, "slurmgen-dump", str(folder), mode, os.environ.get(contract.NODE_BEATS_ENV, ""),
               DUMP_SIGNAL]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
    for proc in procs:
        try:
            _, err = proc.communicate(timeout=60)
            if proc.returncode:
                print(f"slurmgen: hang watch: srun --overlap failed: {err.strip()[:300]}", flush=True)
        except subprocess.TimeoutExpired:
            proc.kill()


def _wait_for_stacks(folder: Path, ranks) -> None:
    """Until these ranks' dumps have arrived (or gone ones said so), at most STACK_WAIT_SECONDS."""
    deadline = time.time() + STACK_WAIT_SECONDS
    while time.time() < deadline:
        if all(_read(folder / f"stack-{r}") or _read(folder / f"state-{r}").strip() == "gone" for r in ranks):
            break
        time.sleep(0.5)
    time.sleep(0.5)  # a dump that has begun finishes


def collect(folder: Path, beats: dict[int, Beat], world: int) -> tuple[list[RankView], dict[int, str]]:
    """Each rank's view and stack text once the dumps have arrived (or STACK_WAIT_SECONDS)."""
    _wait_for_stacks(folder, range(world))
    views, texts = [], {}
    for r in range(world):
        beat = beats.get(r)
        text = _read(folder / f"stack-{r}")
        spy = _read(folder / f"pyspy-{r}")
        texts[r] = text + ("\npy-spy:\n" + spy if spy else "")
        frames = main_thread(parse_threads(text))
        views.append(RankView(r, beat.host if beat else "?", beat.step if beat else 0,
                              _read(folder / f"state-{r}").strip(), where(frames), in_collective(frames)))
    return views, texts


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def report_text(job: str, idle: float, timeout: float, views, texts, lines, suspect) -> str:
    out = [f"slurmgen hang report: job {job}, {time.strftime('%Y-%m-%d %H:%M:%S')}",
           f"no progress for {idle:.0f} s (--hang-timeout {timeout:g})", "", "summary:"]
    out += ["  " + line for line in lines]
    out += [f"  suspect node: {suspect or 'none (the ranks agree, or point at several nodes)'}", "",
            "ranks: (alike ones in one line, the fewest first)", "  rank(s)                node(s)        step  state where"]
    for group in _alike(views, lambda v: (v.step, v.state, v.place)):
        first = group[0]
        out.append(f"  {_who(group):<22} {hosts(v.host for v in group):<14} {first.step:<5} "
                   f"{first.state or '?':<5} {first.place or '?'}")
    # One stack per kind: at a thousand ranks, the odd ones out and a few shared stacks. A stopped
    # or exited rank keeps its own, even where it stopped inside the collective the others wait in.
    for group in _alike(views, lambda v: (v.unusual_state, _VOLATILE.sub("#", texts[v.rank]))):
        where_ = f"{_who(group)} on {hosts(v.host for v in group)}"
        head = f"--- {where_} ---" if len(group) == 1 else f"--- {where_} (one stack for all {len(group)}) ---"
        out += ["", head, texts[group[0].rank].rstrip() or "(no stack)"]
    return "\n".join(out) + "\n"


# What differs between two ranks with the same stack: thread ids, addresses, py-spy's process ids.
_VOLATILE = re.compile(r"0x[0-9a-fA-F]+|(?<=Process )\d+|(?<=Thread )\d+")


def _alike(views, key) -> list[list]:
    """The views grouped by key, the smallest groups (the odd ones out) first, then by rank."""
    groups: dict = {}
    for v in views:
        groups.setdefault(key(v), []).append(v)
    return sorted(groups.values(), key=lambda g: (len(g), g[0].rank))


def _who(group) -> str:
    return f"rank {group[0].rank}" if len(group) == 1 else f"ranks {ranges(v.rank for v in group)}"


def nccl_note(report: Path, job: str) -> str:
    """Where NCCL's flight recorder dumps go (CUDA only; train.heartbeat turns it on)."""
    return (f"NCCL flight recorder (CUDA): {report.parent}/nccl-trace-{job}-rank-N, written when NCCL's own"
            " watchdog times out (--collective-timeout); read with python -m torch.distributed.flight_recorder.fr_trace\n")


def check(folder: Path, timeout: float, world: int, report: Path, groups: list[tuple],
          job: str, since: float = 0.0, outside: bool = False,
          say=print, beats: Optional[dict[int, Beat]] = None) -> Optional[tuple[list[str], Optional[str]]]:
    """One look at the heartbeats (``beats``, read from ``folder`` where not given; those older than
    ``since``, a previous run's, do not count). On a hang: the stacks, the report appended, the
    summary printed; returns (summary lines, suspect node). None while every rank advances."""
    beats = {r: b for r, b in (read_beats(folder) if beats is None else beats).items() if b.time >= since}
    now = time.time()
    # A rank whose script reached its end (train.script_end's mark, this run's) is not stuck: it is in
    # Python's exit or gone while its launcher winds down (torchrun's exit barrier), which may take
    # longer than the timeout after a finished run (seen in CI: a hang report for a finished job).
    stuck = [r for r in stuck_ranks(beats, world, now, timeout)
             if not (folder / contract.ENDED_FILE.format(rank=r)).exists()]
    if not stuck:
        return None
    idle = now - min((beats[r].time for r in stuck if r in beats), default=now - timeout)
    ask_for_stacks(folder, groups, job if outside else None)
    stopped = [r for r in range(world) if _read(folder / f"state-{r}").strip() == "T"]
    if stopped:  # their stacks come once they run again: after everyone else's
        _wait_for_stacks(folder, [r for r in range(world) if r not in stopped])
        ask_for_stacks(folder, groups, job if outside else None, mode="continue")
    views, texts = collect(folder, beats, world)
    lines, suspect = summarize(views)
    with open(report, "a") as fh:
        fh.write(report_text(job, idle, timeout, views, texts, lines, suspect) + nccl_note(report, job))
    say(f"slurmgen: hang: no progress for {idle:.0f} s (--hang-timeout {timeout:g}); report: {report}")
    for line in lines:
        say(f"slurmgen:   {line}")
    sys.stdout.flush()
    return lines, suspect
