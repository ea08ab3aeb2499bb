"""The stop protocol between a run and its batch script.

In: the stop file (SLURMGEN_STOP_FILE, created by the batch script at the time-limit or
preemption warning) and SIGTERM (stop_on_term). stop_requested, called by every rank at every
step, agrees on one answer across ranks, so all stop and checkpoint at the same step.
Out: report_outcome, rank 0's "stopped STEP" or "finished STEP" in SLURMGEN_OUTCOME_FILE, from
which the batch script decides whether to requeue. Also the SLURMGEN_TEST_STEP_SLEEP test hook,
which slows a job's first run at every step boundary.

slurmgen.submit.task uses the same STOP_FILE_ENV name on the submit side.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

from train.collectives import active_group, collective_device

from train.contract import (FINISHED, HEARTBEAT_DIR_ENV, OUTCOME_FILE_ENV, STOP_FILE_ENV, STOP_WAIT_ENV,
                            STOPPABLE_FILE, STOPPED)

# Rank 0 writes "stopped STEP" or "finished STEP" to OUTCOME_FILE_ENV at the end, so the job runtime
# does not requeue a run whose last step came before the warning could stop it.
# Test hook: seconds every rank pauses at each step boundary in a job's first run (before any
# requeue), so an end-to-end time-limit test's first run cannot finish before the warning however
# idle the machine, while the resumed run is not slowed.
STEP_SLEEP_ENV = "SLURMGEN_TEST_STEP_SLEEP"

# Seconds the main thread has to take a SIGTERM before the rank ends (see stop_on_term).
TERM_GRACE_ENV = "SLURMGEN_TERM_GRACE"
DEFAULT_TERM_GRACE = 3.0
_TERMINATED = False


def stop_on_term() -> None:
    """SIGTERM asks for a stop too: it is what ranks get at preemption where the site does not
    send the job's own signal, and what torchrun passes on. The rank finishes its step and
    checkpoints like at the stop file, instead of dying mid-step. A rank stuck in a collective
    never gets there: Python runs a signal handler only between bytecodes, so a watch thread
    ends the rank when the handler has not run TERM_GRACE seconds after the signal. (That is
    also how a crashed rank's sibling on the same node ends when its own torchrun agent stops it:
    at once, so that this node's agent reports the crash before the others, see train.program.)
    Where the stop file exists, though, the TERM is a preemption's or the time limit's (a site
    that sends no user signal): the rank then gets SLURMGEN_STOP_WAIT to take it and checkpoint."""

    global _TERMINATED
    _TERMINATED = False

    def note(signum, frame):
        global _TERMINATED
        _TERMINATED = True

    try:
        signal.signal(signal.SIGTERM, note)
    except ValueError:  # not the main thread (e.g. called from a test's worker thread)
        return
    _watch_for_stuck_term()


def _watch_for_stuck_term() -> None:
    """A thread woken by every signal Python receives (its wakeup fd, written by the C handler
    even while the main thread is blocked)."""
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    try:
        signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    except ValueError:
        os.close(read_end)
        os.close(write_end)
        return
    grace = float(os.environ.get(TERM_GRACE_ENV) or DEFAULT_TERM_GRACE)
    stop_file, stop_wait = os.environ.get(STOP_FILE_ENV), float(os.environ.get(STOP_WAIT_ENV) or 0)

    def watch():
        while True:
            if signal.SIGTERM not in os.read(read_end, 64):
                continue
            began = time.monotonic()
            deadline = began + grace
            while time.monotonic() < deadline:
                if _TERMINATED:  # the main thread took it: it stops at the end of its step
                    return
                if stop_file and stop_wait and deadline < began + stop_wait and os.path.exists(stop_file):
                    # a preemption or the time limit (the batch script's trap made the stop file): a rank in
                    # a long backward or an NCCL wait gets the time to checkpoint, not GRACE
                    deadline = began + stop_wait
                time.sleep(0.05)
            print(f"slurmgen-train: SIGTERM not taken within {grace:g} s (blocked, e.g. in a collective whose"
                  " peer is gone): ending this rank now", file=sys.stderr, flush=True)
            os._exit(128 + signal.SIGTERM)

    threading.Thread(target=watch, name="slurmgen-term-watch", daemon=True).start()


def terminated() -> bool:
    """Whether this rank got SIGTERM since stop_on_term."""
    return _TERMINATED


def stop_requested(is_main: bool) -> bool:
    """Whether the stop file exists (seen by rank 0) or any rank got SIGTERM: agreed by every
    rank, so all stop at the same step.

    One 1-element all_reduce per call: cheap enough for every step.
    """
    if os.environ.get(STEP_SLEEP_ENV) and os.environ.get("SLURM_RESTART_COUNT", "0") == "0":
        time.sleep(float(os.environ[STEP_SLEEP_ENV]))
    path = os.environ.get(STOP_FILE_ENV)
    seen = _TERMINATED or bool(is_main and path and os.path.exists(path))
    dist = active_group()
    if dist is None:
        return seen
    import torch

    flag = torch.tensor([1 if seen else 0], dtype=torch.int32, device=collective_device())
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item())


def report_outcome(stopped_early: bool, step: int) -> None:
    """Rank 0's last word to the batch script: how training ended (see OUTCOME_FILE_ENV)."""
    path = os.environ.get(OUTCOME_FILE_ENV)
    if not path:
        return
    tmp = f"{path}.tmp"
    with open(tmp, "w") as fh:
        fh.write(f"{STOPPED if stopped_early else FINISHED} {step}\n")
    os.replace(tmp, path)


def mark_stoppable() -> None:
    """Say that this run's code takes the stop file (a Trainer with slurmgen's callback): at a warning the
    job runtime then waits for its checkpoint, rather than stopping the ranks after a short grace."""
    folder = os.environ.get(HEARTBEAT_DIR_ENV)
    if folder:
        os.makedirs(folder, exist_ok=True)
        open(os.path.join(folder, STOPPABLE_FILE), "a").close()
