"""Imports without garbage collection (issue 43): what a command's imports make lives as long as the
process, so collecting among it is wasted work (~7 ms of a render's CPU went to it). What was
imported is then frozen, so that a long-running command's collections do not walk it again either."""

from __future__ import annotations

import gc
from contextlib import contextmanager


@contextmanager
def uncollected():
    """No collection inside; on the way out, everything so far frozen and collection as it was."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()
