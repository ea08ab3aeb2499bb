"""Where render's files go: the output path checked first, the log directory made (Slurm opens the
log before the job starts), every file written whole or not at all, and nothing left behind when a
part fails."""

from __future__ import annotations

import os
import sys

from slurmgen.errors import fail
from slurmgen.plan.words import SpecError


def check_output_path(output: str) -> None:
    if output == "-":
        return
    parent = os.path.dirname(os.path.abspath(output))
    if not os.path.isdir(parent):
        raise SpecError(f"-o {output!r}: directory {parent!r} does not exist")
    if os.path.isdir(output):
        raise SpecError(f"-o {output!r}: is a directory; give a file name")


def _encoded(text: str) -> bytes:
    """UTF-8; bytes the command line held undecodable (surrogates) are written back as they came."""
    return text.encode("utf-8", "surrogateescape")


def write_atomically(path: str, text: str) -> None:
    """Write to a temporary file beside the target, then rename: never a half-written script."""
    tmp = os.path.join(os.path.dirname(os.path.abspath(path)),
                       f".{os.path.basename(path)}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o755)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(_encoded(text))
        os.chmod(tmp, 0o755)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def make_log_dir(path: str, option: str = "--log-dir") -> str:
    """Create --log-dir; returns the outermost directory made now ("" when it existed), for undo().
    A directory that cannot be made (/proc/x, a path through a file) is one line, exit 2."""
    try:
        return made_dirs(path, option)
    except SpecError as err:
        fail(str(err))


def made_dirs(path: str, option: str = "--log-dir") -> str:
    """make_log_dir for callers that raise rather than exit (slurmgen.Job): SpecError, one line."""
    outermost, parent = "", os.path.abspath(path)
    while not os.path.lexists(parent):
        outermost, parent = parent, os.path.dirname(parent)
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as err:
        raise SpecError(f"{option} {path!r}: cannot create it: {err.strerror or err}") from None
    return outermost


def undo(made: str, path: str) -> None:
    """Remove the empty directories made now (make_log_dir), from `path` up to `made`."""
    here = os.path.abspath(path)
    while made and (here == made or here.startswith(made + os.sep)):
        try:
            os.rmdir(here)
        except OSError:
            return  # something else is in it now: keep it
        here = os.path.dirname(here)


def _to_stdout(text: str) -> None:
    sys.stdout.flush()  # what click wrote before, first
    sys.stdout.buffer.write(_encoded(text))
    sys.stdout.buffer.flush()


def write_files(files: dict, log_dir: str, snapshot=None) -> None:
    """The log directory, the code snapshot (slurmgen.snapshot.Copy), then every file (path "-":
    stdout); on a failure none of them stays."""
    made = make_log_dir(log_dir)
    new_copy = _write_snapshot(snapshot, made, log_dir)
    written = []
    for path, text in files.items():
        try:
            if path == "-":
                _to_stdout(text)
            else:
                write_atomically(path, text)
                written.append(path)
        except OSError as err:
            for done in written:
                os.unlink(done)
            if new_copy:
                snapshot.remove()
                undo(made, os.path.dirname(snapshot.code.folder))
            undo(made, log_dir)
            fail(f"-o {path!r}: cannot write it: {err.strerror or err}")


def _write_snapshot(snapshot, made: str, log_dir: str) -> bool:
    """Copy the code snapshot, if there is one; True when it was made now (one line, exit 2, and the
    log directory removed again where it cannot be)."""
    if snapshot is None:
        return False
    try:
        return snapshot.write()
    except SpecError as err:  # slurmgen.snapshot.SnapshotError
        undo(made, os.path.dirname(snapshot.code.folder))
        undo(made, log_dir)
        fail(str(err))


def sibling_path(output: str, role: str) -> str:
    """job.sh -> job-submit.sh, job-prep.sh: beside it."""
    stem, ext = os.path.splitext(output)
    return f"{stem}-{role}{ext or '.sh'}"
