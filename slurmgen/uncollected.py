"""Imports without garbage collection (issue 43): what a command's imports make lives as long as the
process, so collecting among it is wasted work (~7 ms of a render's CPU went to it). What was
imported is then frozen, so that a long-running command's collections do not walk it again either;
frozen only in the command's own process (slurmgen.cli.main): where slurmgen is a library (a test
run, a notebook), a freeze would keep the host's uncollected garbage for good."""

from __future__ import annotations

import gc
from contextlib import contextmanager


_command = False  # this process is the slurmgen command (set by slurmgen.cli.main)


def as_command() -> None:
    global _command
    _command = True


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
