"""The code snapshot as the plan knows it: where the copy of the user's --script folder (or its git
repository) lies under the job's log folder, the script inside it, and which commit it came from.
Pure: slurmgen.snapshot measures and copies the files; the plan and the templates only read this."""

from __future__ import annotations

import os
import re

from slurmgen.frozen_records import frozen
from slurmgen.plan.words import SpecError

SNAPSHOTS = "snapshots"       # the folder under --log-dir that holds one folder per content hash
DEFAULT_CEILING = "100M"
LOG_PREFIX = "slurmgen: code: "  # the job log's line (slurmgen.observe.report_logs reads it)

_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([KMGT]?)(?:I?B)?", re.I | re.A)
_UNIT = {"": 1024 ** 2, "K": 1024, "M": 1024 ** 2, "G": 1024 ** 3, "T": 1024 ** 4}  # bare number: MiB


def ceiling_bytes(text: str) -> int:
    """--snapshot-max-size: 100M, 2G, 500K (a bare number is MiB) -> bytes."""
    m = _SIZE.fullmatch(str(text).strip())
    if not m or float(m[1]) <= 0:
        raise SpecError(f"--snapshot-max-size {text!r}: not a size; give one like 100M, 2G or 500K")
    return int(float(m[1]) * _UNIT[m[2].upper()])


def size_text(size: float) -> str:
    """Bytes as a short figure: 1.5 KiB, 230.0 MiB."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


@frozen
class CodeSnapshot:
    """A snapshot that was measured: its folder (log dir/snapshots/HASH), the script inside it, and
    what it is a copy of."""

    folder: str
    script: str            # the --script path inside the folder: what every rank runs
    source: str            # the folder or repository copied
    commit: str = ""       # HEAD's hash; "" outside git (or in a repository without a commit yet)
    dirty: bool = False    # the working tree differs from HEAD (changed, added or untracked files)
    in_git: bool = False
    files: int = 0
    size: int = 0

    @property
    def digest(self) -> str:
        return os.path.basename(self.folder)

    def origin(self) -> str:
        """Which commit ran: 'commit 1a2b... plus uncommitted changes', or why there is none."""
        if not self.in_git:
            return "not in a git repository"
        if not self.commit:
            return "a git repository with no commit yet"
        return f"commit {self.commit}" + (" plus uncommitted changes" if self.dirty else "")

    def describe(self) -> str:
        """One line for the render summary and the job log."""
        return (f"snapshot {self.folder} of {self.source} ({self.origin()}; {self.files} file(s),"
                f" {size_text(self.size)})")

    def log_line(self) -> str:
        return LOG_PREFIX + self.describe()


def snapshot_folder(log_dir: str, digest: str) -> str:
    return os.path.join(log_dir, SNAPSHOTS, digest)
