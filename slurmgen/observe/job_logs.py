"""A job's logs for `slurmgen logs`: which files hold rank R's output, and reading them once or
following them until the job's end is recorded. A submitted job has one pair of files per rank
(submitit's {job}_{R}_log.out/.err); a rendered job's ranks share its job log, where rank R's lines
are those labelled "[rankR]:" (torch's label on a rank's traceback; torchrun labels every line so
with --launcher-arg=--tee=3 and TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE='[rank${rank}]:')."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, Optional, TextIO

from slurmgen.job import index

CHUNK = 1 << 20


class Selection:
    """The files to show, and a filter of their lines (None: every line)."""

    def __init__(self, paths: list[Path], label: Optional[str] = None):
        self.paths, self.label = paths, label

    def keeps(self, line: str) -> bool:
        return self.label is None or line.startswith(self.label)


def select(entry: index.Entry, rank: Optional[int]) -> Selection:
    """Rank R's logs (None: the job's own log; a submitted job's batch output is in rank 0's files).
    ValueError, one line, for a rank the job does not have."""
    if rank is not None and (rank < 0 or (entry.world_size and rank >= entry.world_size)):
        raise ValueError(f"--rank {rank}: job {entry.job_id} has ranks 0 to {entry.world_size - 1}")
    if entry.kind == index.SUBMITTED:
        stem = entry.task_logs.format(rank=rank or 0)
        return Selection([Path(stem + ".out"), Path(stem + ".err")])
    return Selection([Path(p) for p in entry.logs], None if rank is None else f"[rank{rank}]:")


def follow(selection: Selection, ended: Callable[[], bool], out: TextIO, interval: float = 1.0,
           once: bool = False, sleep: Callable[[float], None] = time.sleep) -> int:
    """Write the selected lines (complete ones) as they come, until ended() says the job's end is
    recorded, then what the files still hold. once: what they hold now, then stop. Returns the
    number of lines written."""
    offsets = {p: 0 for p in selection.paths}
    written = 0
    while True:
        done = once or ended()  # asked before the last read: nothing written after the end is missed
        for path in selection.paths:
            offsets[path], lines = _new_lines(path, offsets[path], final=done)
            for line in lines:
                if selection.keeps(line):
                    out.write(line + "\n")
                    written += 1
        out.flush()
        if done:
            return written
        sleep(interval)


def _new_lines(path: Path, offset: int, final: bool) -> tuple[int, list[str]]:
    """Complete lines after offset (a line still being written waits, unless final), and the new offset."""
    try:
        with open(path, "rb") as fh:
            fh.seek(offset)
            chunk = b""
            while True:
                more = fh.read(CHUNK)
                if not more:
                    break
                chunk += more
    except OSError:
        return offset, []
    complete = chunk if final else chunk[:chunk.rfind(b"\n") + 1]
    text = complete.decode(errors="replace")
    return offset + len(complete), text.splitlines()
