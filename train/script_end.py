"""Whether a user's own script reached its end: a rank's "ended" mark (contract.ENDED_FILE in the heartbeat
folder), written at Python's exit when the script neither raised nor exited with a non-zero status.

Why: a script whose work is done can still die after Python has run its last line: with gloo,
torch's threads are destroyed inside a C++ destructor during finalization ("terminate called without
an active exception", SIGABRT, exit -6). torchrun and srun then fail the step, and without this mark
the job runtime would count a crash and requeue a job that had finished (slurmgen.job.script_end).

When: once the script's main module has ended and Python has joined its non-daemon threads, before
any atexit handler (torch's, the user's) and the C++ teardown where the abort happens. That is when a
Python process's exit status is settled (an atexit handler's exception does not change it), and as
early as it can be: torchrun TERMs a node's other ranks as soon as one of them fails, and a rank still
in its own exit handlers would lose its mark. How: threading runs its own exit callbacks first at
shutdown (threading._register_atexit, 3.9+), and the one registered here then registers the mark's
atexit handler, which, registered last, runs first. A plain atexit handler registered at install
(run last of all) is the fallback should that private hook be missing. Not ended well, so no mark:
  * an unhandled exception: Python sets sys.last_value (3.12: sys.last_exc too) before it calls
    sys.excepthook, whoever replaced that;
  * a non-zero SystemExit, which never reaches sys.excepthook and leaves no trace by exit time:
    builtins.SystemExit is a subclass that notes its code when made (`raise SystemExit(3)`, exit(3)),
    and sys.exit raises that subclass, so `except SystemExit` still catches what sys.exit raises. One
    the script made and caught also counts: the safe side. (C code that raises the built-in class
    itself, as _thread.exit, is neither noted nor caught by a script's `except SystemExit`: rare);
  * os._exit, a signal, a kill: no atexit handler runs at all.
Only the rank's own process marks: the first Python with RANK claims it (contract.RANK_PROCESS_ENV), so
a Python it starts (a spawned DataLoader worker, an evaluation script) that ends well does not speak
for a rank that then fails, and a forked child's exit is not its parent's.
Only the standard library and train.heartbeat here: this is imported before the script runs.
"""

from __future__ import annotations

import atexit
import builtins
import os
import sys

from train import contract, heartbeat

_failed_exit = False  # a SystemExit with a non-zero code was made
_marked = False  # at_exit runs twice: first (registered at shutdown) and last (the fallback)
_owner = 0  # the rank's process (a forked child inherits the handlers, not the right to mark)


def _notes(code) -> None:
    global _failed_exit
    if code not in (None, 0):  # (False == 0: fine too)
        _failed_exit = True


class _NotedExit(builtins.SystemExit):
    """SystemExit as the script sees it: the same class for `except SystemExit`, its code noted."""

    def __init__(self, *args):
        super().__init__(*args)
        _notes(self.code)


def install() -> None:
    """Called by train/rank_hooks before the script runs (first of the atexit handlers: last to run)."""
    global _owner
    if not os.environ.get(contract.HEARTBEAT_DIR_ENV) or os.environ.get(contract.RANK_PROCESS_ENV):
        return  # no job folder, or a process the rank started
    os.environ[contract.RANK_PROCESS_ENV] = str(os.getpid())
    _owner = os.getpid()
    _NotedExit.__name__ = _NotedExit.__qualname__ = "SystemExit"
    _NotedExit.__module__ = "builtins"  # a pickle of one names SystemExit, whatever reads it
    builtins.SystemExit = _NotedExit

    def exit(status=None):  # noqa: A001 (sys.exit's own name, for tracebacks)
        # raise the noted class, not call the real sys.exit: its SystemExit is the built-in class, which a
        # script's `except SystemExit` (now the subclass) would no longer catch
        raise _NotedExit(status)

    sys.exit = exit
    mark_path().unlink(missing_ok=True)  # a mark from this rank's earlier process is not this one's
    atexit.register(at_exit)
    try:
        import threading

        threading._register_atexit(_first_at_exit)
    except (AttributeError, RuntimeError):  # not on this Python: the handler above, last
        pass


def _first_at_exit() -> None:
    """At shutdown, before threading joins the threads: at_exit, first of the atexit handlers. Never
    raises: an exception here would leave the threads unjoined."""
    try:
        atexit.register(at_exit)
    except Exception:  # the fallback handler, last, still marks
        pass


def mark_path():
    from pathlib import Path

    return Path(os.environ[contract.HEARTBEAT_DIR_ENV]) / contract.ENDED_FILE.format(rank=heartbeat.rank())


def ended_well() -> bool:
    """At exit: the script raised nothing it left unhandled and made no non-zero SystemExit."""
    unhandled = getattr(sys, "last_value", None) is not None or getattr(sys, "last_exc", None) is not None
    return not unhandled and not _failed_exit


def at_exit() -> None:
    global _marked
    if _marked or os.getpid() != _owner or not ended_well():
        return
    _marked = True
    path = mark_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(path.name + ".tmp")
        temporary.write_text(f"{heartbeat.rank()} {heartbeat.node_name()} {os.getpid()}\n")
        os.replace(temporary, path)  # whole or absent: the runtime may read it at any moment
    except OSError as exc:
        print(f"slurmgen rank hooks: cannot write the end mark ({exc}); an abort at exit would count as a failure",
              file=sys.stderr, flush=True)
