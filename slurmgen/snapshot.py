"""The code snapshot (issue 44): at render and submit, the user's --script folder (or its git
repository, slurmgen.snapshot_files) is measured, refused over the ceiling, and copied once into
--log-dir/snapshots/HASH, a folder named by its content, so that every run of the job (requeues and
retries included) runs the code as it was rendered, not as it is when the run starts.

Measuring reads every file once (the hash names the folder, which the plan needs) and keeps what it
read: the copy is a side effect of writing, like the script itself, and holds exactly the bytes the
hash names, however the folder changes meanwhile (another job writing its logs beside the code).
`take` gives the spec its snapshot and a Copy that writing.write_files (or submit) makes. The same
content is the same folder: it is copied once."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import shutil
import stat
import tempfile
from typing import Optional

from slurmgen import snapshot_files
from slurmgen.plan.code_snapshot import CodeSnapshot, ceiling_bytes, size_text, snapshot_folder
from slurmgen.plan.spec import JobSpec
from slurmgen.plan.words import SpecError, train_arg
from slurmgen.writing import sibling_path

DIGEST_CHARS = 16  # 64 bits of SHA-256: a folder name that is short, and unique for all practical use


class SnapshotError(SpecError):
    """The copy could not be made (one line)."""


@dataclasses.dataclass(frozen=True)
class Copy:
    """A measured snapshot, to be written where the job's files are written."""

    code: CodeSnapshot
    contents: tuple[tuple[str, bytes, bytes], ...]  # (path, kind, bytes) of each file, as hashed

    def write(self) -> bool:
        """Copy the files into the snapshot folder, unless it is there already; True when made now.
        The copy is made beside it and renamed, so that a folder of that name is always whole."""
        folder = self.code.folder
        if os.path.isdir(folder):
            return False
        parent = os.path.dirname(folder)
        try:
            os.makedirs(parent, exist_ok=True)
            _mark(parent)
            tmp = tempfile.mkdtemp(prefix=f".{self.code.digest}.", dir=parent)
        except OSError as err:
            raise SnapshotError(f"code snapshot {folder!r}: cannot create it: {err.strerror or err}") from None
        try:
            for rel, kind, data in self.contents:
                _place(os.path.join(tmp, rel), kind, data)
            os.chmod(tmp, 0o755)
            os.rename(tmp, folder)
        except OSError as err:
            shutil.rmtree(tmp, ignore_errors=True)
            if os.path.isdir(folder):  # made by another render of the same code meanwhile
                return False
            raise SnapshotError(f"code snapshot {folder!r}: cannot write it: {err.strerror or err}") from None
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return True

    def remove(self) -> None:
        """Undo write() (another file of the job could not be written)."""
        shutil.rmtree(self.code.folder, ignore_errors=True)


def _mark(parent: str) -> None:
    """The snapshots folder says what it is (and so is never copied as code: snapshot_files.MARKER)."""
    marker = os.path.join(parent, snapshot_files.MARKER)
    if not os.path.exists(marker):
        with open(marker, "w") as handle:
            handle.write("Code snapshots of slurmgen jobs, one folder per content hash; each job's script names its own.\n")


def take(spec: JobSpec, *written: Optional[str]) -> tuple[JobSpec, Optional[Copy]]:
    """The spec with its snapshot (spec.code: the plan runs the copy), and the Copy to write; the
    spec as it is with --no-snapshot or without --script. written: the files the command writes
    besides the logs (render's -o, submit's --folder), which are no code. Raises SpecError (one line)
    over the ceiling."""
    if not spec.snapshot or spec.script is None:
        return spec, None
    folder = os.path.dirname(spec.script)
    source = snapshot_files.find(folder, _outputs(spec, written), keep=spec.script)
    ceiling = ceiling_bytes(spec.snapshot_max_size)
    if source.size > ceiling:
        what = "its git repository" if source.in_git else "its folder"
        raise SpecError(f"--script {spec.script!r}: the code snapshot of {what} {source.root} is"
                        f" {size_text(source.size)}, over the {size_text(ceiling)} ceiling; raise --snapshot-max-size,"
                        " keep data out of it (.gitignore), or give --no-snapshot")
    contents = _read_all(source)
    home = snapshot_folder(spec.log_dir, _digest(contents))
    script = os.path.join(home, source.script)
    code = CodeSnapshot(home, script, source.root, source.commit, source.dirty, source.in_git,
                        len(source.files), source.size)
    return dataclasses.replace(spec, code=code), Copy(code, contents)


def _outputs(spec: JobSpec, written) -> list[str]:
    """What the job writes, never code: its logs (and snapshots), the command's files (a rendered
    script's -submit and -prep siblings too), the training output and the Hugging Face cache."""
    out = train_arg(spec.train_args, "--output_dir", "--output-dir")
    paths = [spec.log_dir, spec.hf_home, out and os.path.abspath(out)]
    for path in (p for p in written if p and p != "-"):
        paths += [os.path.abspath(path), *(os.path.abspath(sibling_path(path, r)) for r in ("submit", "prep"))]
    return [p for p in paths if p]


def _read_all(source: snapshot_files.Source) -> tuple[tuple[str, bytes, bytes], ...]:
    """(path, kind, bytes) of each file, read once: what is hashed is what is copied (under the
    --snapshot-max-size ceiling, held in memory until the job's files are written)."""
    contents = []
    for rel in source.files:
        path = os.path.join(source.root, rel)
        try:
            contents.append((rel, *_read(path, follow=rel == source.script)))
        except OSError as err:
            raise SpecError(f"--script: cannot read {path!r} for the code snapshot: {err.strerror or err};"
                            " give --no-snapshot to run in place") from None
    return tuple(contents)


def _digest(contents) -> str:
    """The content hash of the files (path, kind and bytes of each, in order)."""
    whole = hashlib.sha256()
    for rel, kind, data in contents:
        whole.update(rel.encode("utf-8", "surrogateescape") + b"\0" + kind + b"\0")
        whole.update(hashlib.sha256(data).digest())
    return whole.hexdigest()[:DIGEST_CHARS]


def _read(path: str, follow: bool = False) -> tuple[bytes, bytes]:
    """(kind, bytes): b"l" and the target of a symbolic link (unless `follow`), b"x" or b"f" and the
    content of a file."""
    info = os.stat(path) if follow else os.lstat(path)
    if stat.S_ISLNK(info.st_mode):
        return b"l", os.fsencode(os.readlink(path))
    with open(path, "rb") as handle:
        return (b"x" if info.st_mode & 0o111 else b"f"), handle.read()


def _place(path: str, kind: bytes, data: bytes) -> None:
    """One file of the copy, read-only (a snapshot is not edited)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if kind == b"l":
        os.symlink(os.fsdecode(data), path)
        return
    with open(path, "wb") as handle:
        handle.write(data)
    os.chmod(path, 0o555 if kind == b"x" else 0o444)
