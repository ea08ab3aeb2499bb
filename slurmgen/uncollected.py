"""Imports without garbage collection (issue 43): what a command's imports make lives as long as the
process, so collecting among it is wasted work (~7 ms of a render's CPU went to it). What was
imported is then frozen, so that a long-running command's collections do not walk it again either;
frozen only in the command's own process (marked by slurmgen.__main__ before click is imported):
where slurmgen is a library (a test run, a notebook), a freeze would keep the host's uncollected
garbage for good. A quick command's process then ends without the interpreter's teardown, which
frees every object one by one (~2% of a render's work): Instagram's gc.freeze with os._exit, where
nothing waits for the teardown."""

from __future__ import annotations

import atexit
import gc
import os
import sys
from contextlib import contextmanager


_command = False  # this process is the slurmgen command (set by slurmgen.__main__ and slurmgen.cli.main)
_quick = False  # ... running a command that writes its files with `with` and leaves no thread


def as_command() -> None:
    global _command
    _command = True


def as_quick_command() -> None:
    global _quick
    _quick = _command


def leave(status) -> None:
    """In a quick command's process: flush, then end it now with `status` (an int or None, as
    SystemExit's), unless something waits for the teardown: an atexit hook (logging's, a temporary
    directory's finalizer), another thread, a stream that cannot be flushed (a closed pipe: Python's
    own exit says so). Otherwise return, and the caller ends the process as usual."""
    hooks = getattr(atexit, "_ncallbacks", lambda: 1)()  # CPython's count; elsewhere, assume some
    if not _quick or not (status is None or isinstance(status, int)) or hooks:
        return
    threading = sys.modules.get("threading")
    if threading is not None and threading.active_count() > 1:
        return
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        return
    os._exit(status or 0)


@contextmanager
def uncollected():
    """No collection inside; on the way out, in the command's process, everything so far frozen; and
    collection as it was."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if _command:
            gc.freeze()
        if enabled:
            gc.enable()
