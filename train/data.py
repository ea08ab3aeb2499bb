"""Training data: checking a data set argument, loading it, checking its columns, saving it.

A data set is a local file (its suffix picks the ``datasets`` builder), a local directory
(saved with save_to_disk, or loadable by ``datasets``), or a hub name. Problems are
UsageErrors. ``datasets`` is imported only inside load_data, so the checks stay cheap.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from train import heartbeat
from train.cli import UsageError
from train.hub import HUB_ID

_BUILDERS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".arrow": "arrow", ".csv": "csv"}


def check_data_path(name: str | None, flag: str) -> None:
    if not name:
        raise UsageError(f"{flag} is required")
    path = Path(name).expanduser()
    if path.is_file():
        if path.suffix not in _BUILDERS:
            raise UsageError(
                f"unsupported data file type {path.suffix!r}: {name} (use one of {', '.join(_BUILDERS)})"
            )
        return
    if path.is_dir():
        return
    # Not local: a hub name (load_data reports a hub miss, cached copies work offline).
    if not HUB_ID.match(name) or name.startswith(("/", ".", "~")):
        raise UsageError(f"dataset not found: {name}")


def load_data(name: str, split: str = "train", config: str | None = None, streaming: bool = False):
    """A data set from a local file, a local directory, or the hub.

    ``load_dataset("x.jsonl")`` does not work: local files need their builder
    ("json", "parquet", ...) with ``data_files``.
    """
    import datasets

    path = Path(name).expanduser()
    if path.is_file():
        return datasets.load_dataset(
            _BUILDERS[path.suffix], data_files=str(path), split="train", streaming=streaming
        )
    if path.is_dir() and ((path / "dataset_info.json").is_file() or (path / "state.json").is_file()):
        loaded = datasets.load_from_disk(str(path))
        return loaded[split] if isinstance(loaded, datasets.DatasetDict) else loaded
    if path.is_dir():
        return datasets.load_dataset(str(path), config, split=split, streaming=streaming)
    try:
        return datasets.load_dataset(name, config, split=split, streaming=streaming)
    except (FileNotFoundError, ConnectionError, ValueError) as exc:
        # datasets' own errors are multi-line; the hub being unreachable is the usual cause.
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UsageError(f"dataset not found: {name} ({first})") from None


def save_atomically(ds, dest: str | Path) -> None:
    """``ds.save_to_disk(dest)`` without ever leaving a half-written ``dest``: written beside
    it, then renamed into place, so a reader finds the whole data set or none."""
    dest = Path(dest).expanduser()
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp, old = (dest.with_name(f".{dest.name}.{kind}-{os.getpid()}") for kind in ("tmp", "old"))
    shutil.rmtree(tmp, ignore_errors=True)  # left by a killed writer that had this pid
    try:
        ds.save_to_disk(str(tmp))
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if dest.exists():  # a rerun: rename cannot replace a non-empty directory
        dest.rename(old)
    tmp.rename(dest)
    shutil.rmtree(old, ignore_errors=True)


def column_names(ds) -> list[str]:
    names = getattr(ds, "column_names", None)
    if names is None:  # streaming data sets may not know their columns before reading
        names = list(next(iter(ds)).keys())
    return list(names)


def require_columns(ds, name: str, needed: list[str]) -> None:
    present = column_names(ds)
    missing = [c for c in needed if c not in present]
    if missing:
        raise UsageError(
            f"data set {name} has no column {missing[0]!r} (columns present: {', '.join(present) or 'none'})"
        )


def batches(loader, step: int):
    """The loader's batches for the steps after ``step``; the hang watch's test hook
    (train.heartbeat.hang_in_data_loader) sits here, where a stuck data loader hangs."""
    for batch in loader:
        step += 1
        heartbeat.hang_in_data_loader(step)
        yield batch
