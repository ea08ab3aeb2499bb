"""The ranks' stack dumps read: where each stuck rank is, in the few lines a hang report shows."""

from __future__ import annotations

import os
import re
from collections import Counter
from dataclasses import dataclass
from typing import Optional



@dataclass(frozen=True)
class Frame:
    path: str
    line: int
    func: str


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


def hosts(names) -> str:
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
        lines.append(f"{noun} {ranks} on {hosts(v.host for v in rest)} (step {ranges({v.step for v in rest})}) "
                     f"{verb} in {place}{elsewhere}")
    # A stopped, exited or traced process is the hang's cause; ranks merely elsewhere (one still
    # in a backward whose all_reduce waits for it) are its effect.
    suspects = {v.host for v in odd if v.unusual_state} or {v.host for v in odd}
    return lines, (suspects.pop() if len(suspects) == 1 and rest else None)


_STATES = {"T": "stopped by a signal (SIGSTOP?)", "t": "stopped by a debugger", "Z": "exited (zombie)",
           "D": "in uninterruptible I/O", "gone": "no longer running"}
