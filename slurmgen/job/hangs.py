"""The hang watch: `python -m slurmgen.job.hangs`, started by the batch script beside the training steps.

Every rank writes its heartbeat (train.heartbeat: rank, step, time, host, pid) at each step, and
during a checkpoint save the save's allowance (train.saves). When a rank has not advanced for the
hang timeout (while some rank saves: for that save's allowance), the watch asks every rank for its Python stacks
without stopping the job (one `srun --overlap` per component: the faulthandler signal, and py-spy
where the site has it), groups the ranks by where they are, names the odd ones out, appends the
report to hang-report-JOBID.txt beside the job log, prints its summary to the log, and writes
the suspect node (or nothing) to the hang file. The batch script's monitor sees that file, stops
the job and retries it (slurmgen.job.retry). Standard library and python-hostlist only.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

DUMP_SIGNAL = "USR1"  # train.heartbeat.DUMP_SIGNAL
HANG_FILE = "hung"
POLL_SECONDS = 5.0
STACK_WAIT_SECONDS = 10.0

# Runs on every node of a component: signal the ranks that beat from this host ("signal"). A
# stopped rank (SIGSTOP, a debugger) takes the signal only once continued ("continue", a second
# round once every other rank has answered: continued earlier, it could let the others move on
# before their stacks are taken); the job is stopped next anyway. py-spy, where installed, reads
# the stack without the rank's help.
_DUMP = r'''
d=$1 mode=$2 h=${SLURMD_NODENAME:-$(hostname)}
for f in "$d"/rank-*; do
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
    kill -USR1 "$pid"
done
exit 0
'''
_STATES = {"T": "stopped by a signal (SIGSTOP?)", "t": "stopped by a debugger", "Z": "exited (zombie)",
           "D": "in uninterruptible I/O", "gone": "no longer running"}


@dataclass(frozen=True)
class Beat:
    rank: int
    step: int
    time: float
    host: str
    pid: int
    save_allowance: float = 0.0  # seconds, while this rank is in a checkpoint save


@dataclass(frozen=True)
class Frame:
    path: str
    line: int
    func: str


def read_beats(folder: Path) -> dict[int, Beat]:
    beats = {}
    for path in folder.glob("rank-*"):
        if path.suffix == ".tmp":
            continue
        try:
            rank, step, when, host, pid, *phase = path.read_text().split()
            allowance = float(phase[1]) if phase[:1] == ["save"] else 0.0
            beats[int(rank)] = Beat(int(rank), int(step), float(when), host, int(pid), allowance)
        except (OSError, ValueError, IndexError):
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


_FRAME = re.compile(r'^\s*File "(?P<path>.*)", line (?P<line>\d+) in (?P<func>.*)$')


def parse_threads(text: str) -> list[list[Frame]]:
    """faulthandler's dump: per thread, its frames innermost first."""
    threads: list[list[Frame]] = []
    for line in text.splitlines():
        if line.startswith(("Thread 0x", "Current thread 0x")):
            threads.append([])
        elif threads and (m := _FRAME.match(line)):
            threads[-1].append(Frame(m["path"], int(m["line"]), m["func"].strip()))
    return threads


def main_thread(threads: list[list[Frame]]) -> list[Frame]:
    """The thread that runs the program: the one with the module being run (a script's
    outermost frame; under `python -m`, inside runpy's)."""
    for frames in threads:
        if any(f.func == "<module>" for f in frames):
            return frames
    return threads[0] if threads else []


def short_path(path: str) -> str:
    for marker in ("/site-packages/", "/dist-packages/"):
        if marker in path:
            return path.split(marker, 1)[1]
    cwd = os.getcwd() + "/"
    if path.startswith(cwd):
        return path[len(cwd):]
    return "/".join(path.split("/")[-2:])


def _is_library(frame: Frame) -> bool:
    return (frame.path.startswith("<") or "-packages/" in frame.path
            or re.search(r"/lib/python3\.\d+/", frame.path) is not None)


def where(frames: list[Frame]) -> str:
    """Where a rank is: its innermost frame, and the next frame of its own code (not a library's)
    that called it (`_engine_run_backward (torch/autograd/graph.py:829), called from _main (...)`)."""
    if not frames:
        return "no stack"
    inner = frames[0]
    text = f"{inner.func} ({short_path(inner.path)}:{inner.line})"
    own = next((f for f in frames[1:] if not _is_library(f)), None)
    if own is not None:
        text += f", called from {own.func} ({short_path(own.path)}:{own.line})"
    return text


def ranges(numbers) -> str:
    """0,1,2,4,5 -> 0-2,4-5"""
    out, numbers = [], sorted(numbers)
    start = prev = None
    for n in numbers + [None]:
        if start is not None and (n is None or n != prev + 1):
            out.append(str(start) if start == prev else f"{start}-{prev}")
            start = None
        if n is not None and start is None:
            start = n
        prev = n
    return ",".join(out)


def _hosts(names) -> str:
    import hostlist
    return hostlist.collect_hostlist(sorted(set(names)))


def in_collective(frames: list[Frame]) -> bool:
    """Whether a stack waits on the other ranks: inside torch.distributed, DDP, or the autograd
    engine (where DDP's gradient all_reduce blocks a backward)."""
    return any("torch/distributed/" in f.path or "torch/nn/parallel/distributed" in f.path
               or f.func == "_engine_run_backward" for f in frames)


@dataclass(frozen=True)
class RankView:
    rank: int
    host: str
    step: int
    state: str      # a /proc state letter, "gone", or "" when the node did not answer
    place: str      # where(...) of its main thread
    waiting: bool = False  # in_collective(...) of its main thread

    @property
    def unusual_state(self) -> str:
        return _STATES.get(self.state, "")


def summarize(views: list[RankView]) -> tuple[list[str], Optional[str]]:
    """Summary lines, odd ones out first, and the node to blame: the one node every stopped or
    exited rank is on, else every odd rank; None when the ranks agree or point at several nodes.

    Where some ranks wait in a collective and others do not, those others are the odd ones out
    (a rank in forward's buffer broadcast and one in backward's all_reduce wait for the same
    missing peer). Otherwise the largest group of ranks at one place is the usual one. Either way
    a stopped process, or a rank behind the others' step, is odd too."""
    top_step = max(v.step for v in views)
    waiting = [v for v in views if v.waiting]
    if waiting and len(waiting) < len(views):
        usual = waiting
    else:
        groups: dict[str, list[RankView]] = {}
        for v in views:
            groups.setdefault(v.place, []).append(v)
        usual = groups[max(groups, key=lambda p: (len(groups[p]), max(v.step for v in groups[p])))]
    odd = [v for v in views if v not in usual or v.unusual_state or v.step < top_step]
    lines = []
    for v in sorted(odd, key=lambda v: v.rank):
        notes = [f"step {v.step}"] + ([v.unusual_state] if v.unusual_state else [])
        lines.append(f"rank {v.rank} on {v.host} ({', '.join(notes)}) is in {v.place}")
    rest = [v for v in views if v not in odd]
    if rest:
        places = Counter(v.place for v in rest)
        place, count = places.most_common(1)[0]
        elsewhere = f" ({len(rest) - count} elsewhere)" if count < len(rest) else ""
        ranks = ranges(v.rank for v in rest)
        noun = "rank" if len(rest) == 1 else "ranks"
        verb = ("is" if len(rest) == 1 else "wait") if odd else "are all"
        lines.append(f"{noun} {ranks} on {_hosts(v.host for v in rest)} (step {ranges({v.step for v in rest})}) "
                     f"{verb} in {place}{elsewhere}")
    # A stopped, exited or traced process is the hang's cause; ranks merely elsewhere (one still
    # in a backward whose all_reduce waits for it) are its effect.
    suspects = {v.host for v in odd if v.unusual_state} or {v.host for v in odd}
    return lines, (suspects.pop() if len(suspects) == 1 and rest else None)


def ask_for_stacks(folder: Path, groups: list[tuple[str, int]], job: Optional[str] = None,
                   mode: str = "signal") -> None:
    """One `srun --overlap` per component into the running job (from outside it: ``job``); each
    signals its node's ranks (mode "signal"), or continues its stopped ones ("continue")."""
    procs = []
    for group, nodes in groups:
        het = [f"--het-group={group}"] if group != "-" else []
        het += [f"--jobid={job}"] if job else []
        # --mem=0: where memory is a consumable, the training step holds all of it (checked
        # on 22.05: without it, "Memory required by task is not available")
        cmd = ["srun", "--overlap", *het, f"--nodes={nodes}", f"--ntasks={nodes}",
               "--ntasks-per-node=1", "--cpus-per-task=1", "--mem=0", "--quiet",
               "bash", "-c", _DUMP, "slurmgen-dump", str(folder), mode]
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
            "ranks:", "  rank  node          step  state"]
    out += [f"  {v.rank:<5} {v.host:<13} {v.step:<5} {v.state or '?'}" for v in views]
    for v in views:
        out += ["", f"--- rank {v.rank} on {v.host} ---", texts[v.rank].rstrip() or "(no stack)"]
    return "\n".join(out) + "\n"


def nccl_note(report: Path, job: str) -> str:
    """Where NCCL's flight recorder dumps go (CUDA only; train.heartbeat turns it on)."""
    return (f"NCCL flight recorder (CUDA): {report.parent}/nccl-trace-{job}-rank-N, written when NCCL's own"
            " watchdog times out (--collective-timeout); read with python -m torch.distributed.flight_recorder.fr_trace\n")


def check(folder: Path, timeout: float, world: int, report: Path, groups: list[tuple[str, int]],
          job: str, since: float = 0.0, outside: bool = False,
          say=print) -> Optional[tuple[list[str], Optional[str]]]:
    """One look at the heartbeats (those older than ``since``, a previous run's, do not count).
    On a hang: the stacks, the report appended, the summary printed; returns (summary lines,
    suspect node). None while every rank advances."""
    beats = {r: b for r, b in read_beats(folder).items() if b.time >= since}
    now = time.time()
    stuck = stuck_ranks(beats, world, now, timeout)
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


def watch(folder: Path, timeout: float, world: int, report: Path, groups: list[tuple[str, int]]) -> int:
    """The batch script's watch: until a hang (then the hang file for the monitor) or its end."""
    parent = os.getppid()
    job = os.environ.get("SLURM_JOB_ID", "?")
    while True:
        time.sleep(min(POLL_SECONDS, timeout / 4))
        if os.getppid() != parent:  # the batch script is gone
            return 0
        found = check(folder, timeout, world, report, groups, job)
        if found is not None:
            (folder / HANG_FILE).write_text(f"{found[1] or ''}\n")
            return 0


def parse_groups(text: str) -> list[tuple[str, int]]:
    """"0:2,1:2" (het group:nodes) or "-:4" (a plain job)."""
    out = []
    for part in text.split(","):
        group, _, nodes = part.partition(":")
        out.append((group, int(nodes)))
    return out


def main(argv: list[str]) -> int:
    """TIMEOUT WORLD GROUPS; the heartbeats are in $SLURMGEN_HEARTBEAT_DIR, the report goes beside
    it (the log directory) as hang-report-$SLURM_JOB_ID.txt."""
    folder = os.environ.get("SLURMGEN_HEARTBEAT_DIR")
    if len(argv) != 3 or not folder:
        print("usage: SLURMGEN_HEARTBEAT_DIR=DIR python -m slurmgen.job.hangs TIMEOUT WORLD GROUPS", file=sys.stderr)
        return 2
    timeout, world, groups = argv
    report = Path(folder).parent / f"hang-report-{os.environ.get('SLURM_JOB_ID', '0')}.txt"
    return watch(Path(folder), float(timeout), int(world), report, parse_groups(groups))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
