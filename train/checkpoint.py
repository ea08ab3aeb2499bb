"""Checkpoints that are either complete or ignored.

A checkpoint directory ``checkpoint-N`` counts only once the marker file
``slurmgen_complete`` is in it, and the marker is written last (after every rank has
finished writing). A job killed while saving (time limit, preemption) therefore leaves
at worst an unmarked directory that resume skips, never one it picks and crashes on.

Used by all three entry points; HF trainers write the directory themselves and get the
marker from ``MarkCompleteCallback`` (train/hf.py); ddp_loop uses ``staged_checkpoint``.
No torch import here: the functions are plain file handling.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import time
from pathlib import Path
from typing import Iterator

MARKER = "slurmgen_complete"
PREFIX = "checkpoint-"
_NAME = re.compile(r"^checkpoint-(\d+)$")


def checkpoint_path(output_dir: str | os.PathLike, step: int) -> Path:
    return Path(output_dir) / f"{PREFIX}{step}"


def list_checkpoints(output_dir: str | os.PathLike) -> list[tuple[int, Path]]:
    """All ``checkpoint-N`` directories, complete or not, oldest step first."""
    root = Path(output_dir)
    if not root.is_dir():
        return []
    found = []
    for child in root.iterdir():
        m = _NAME.match(child.name)
        if m and child.is_dir():
            found.append((int(m.group(1)), child))
    return sorted(found)


def is_complete(path: str | os.PathLike) -> bool:
    return (Path(path) / MARKER).is_file()


def latest_complete(output_dir: str | os.PathLike) -> tuple[int, Path] | None:
    """The newest complete checkpoint as (step, path), or None."""
    for step, path in reversed(list_checkpoints(output_dir)):
        if is_complete(path):
            return step, path
    return None


def _fsync_dir(path: Path) -> None:
    # Makes a rename or a new file durable; not every filesystem allows it.
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def write_json_atomic(path: str | os.PathLike, payload: dict) -> None:
    """Readers see the old file or the new one, never half of one."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with open(tmp, "w") as fh:
        json.dump(payload, fh, indent=2, sort_keys=True)
        fh.write("\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def mark_complete(path: str | os.PathLike, step: int | None = None) -> None:
    """Declare a fully written checkpoint usable. Call once all its files are on disk."""
    path = Path(path)
    write_json_atomic(path / MARKER, {"step": step, "time": time.time()})


def set_aside_incomplete(output_dir: str | os.PathLike) -> list[Path]:
    """Rename unmarked checkpoint dirs to ``incomplete-checkpoint-N``.

    They must leave the ``checkpoint-*`` namespace: HF Trainer rotates and sorts every
    ``checkpoint-*`` dir, and a later save of step N must not land on top of half a
    directory. Kept rather than deleted, so nothing is lost without a trace.
    Call on the main rank only, before anyone looks for a checkpoint to resume.
    """
    moved = []
    for step, path in list_checkpoints(output_dir):
        if is_complete(path):
            continue
        target = path.with_name(f"incomplete-{path.name}")
        if target.exists():
            shutil.rmtree(target)
        os.replace(path, target)
        moved.append(target)
    return moved


@contextlib.contextmanager
def staged_checkpoint(output_dir: str | os.PathLike, step: int) -> Iterator[Path]:
    """Yield a staging dir to fill; on success it is marked and renamed to ``checkpoint-N``.

    If the body raises (or the process dies), only a hidden staging dir is left.
    """
    final = checkpoint_path(output_dir, step)
    staging = Path(output_dir) / f".staging-{PREFIX}{step}"
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir(parents=True)
    yield staging
    mark_complete(staging, step)
    if final.exists():
        shutil.rmtree(final)
    os.replace(staging, final)
    _fsync_dir(Path(output_dir))


def prune(output_dir: str | os.PathLike, keep: int | None, protect: str | os.PathLike | None = None) -> None:
    """Keep the newest ``keep`` complete checkpoints (None or <= 0: keep all), and ``protect``
    (e.g. the best model's) besides. Called after the newest one's marker is written, so a kill
    at any moment leaves at least one complete checkpoint."""
    if not keep or keep <= 0:
        return
    complete = [(s, p) for s, p in list_checkpoints(output_dir) if is_complete(p)]
    keep_too = Path(protect).resolve() if protect else None
    for _, path in complete[:-keep]:
        if path.resolve() != keep_too:
            shutil.rmtree(path, ignore_errors=True)
