"""A checkpoint save as the job sees it: progress, not a hang, however long it takes.

begin(step) and end(step) bracket a save on every rank (the ranks that do not write wait for
rank 0 in between). Meanwhile:
  * the rank's heartbeat says "saving" with the save's allowance (train.heartbeat), so the hang
    watch waits that long, not --hang-timeout, before it calls anything a hang;
  * the process group's timeout is raised to the allowance, so the ranks waiting for rank 0 do
    not abort on SLURMGEN_COLLECTIVE_TIMEOUT in the middle of a long save.
The allowance is SLURMGEN_SAVE_TIMEOUT (--save-timeout) where given, else three times the
longest save of this run, and never under DEFAULT_ALLOWANCE. Rank 0 warns in the job log when a
save took longer than the time a time-limit warning leaves ranks to stop (SLURMGEN_STOP_WAIT).

Test hook: SLURMGEN_TEST_SAVE_SLEEP="STEP:SECONDS" makes rank 0 pause SECONDS inside the save of
step STEP, once its files are written and before the checkpoint is marked complete.
"""

from __future__ import annotations

import os
import sys
import time

from train import collectives, contract, heartbeat
from train.contract import STOP_WAIT_ENV

SAVE_TIMEOUT_ENV = contract.SAVE_TIMEOUT_ENV
SAVE_SLEEP_ENV = "SLURMGEN_TEST_SAVE_SLEEP"
DEFAULT_ALLOWANCE = 600.0  # the default collective timeout: what a save could take before

_started: float | None = None
_longest = 0.0


def allowance() -> float:
    raw = os.environ.get(SAVE_TIMEOUT_ENV)
    if raw:
        return float(raw)
    return max(DEFAULT_ALLOWANCE, 3 * _longest)


def begin(step: int) -> None:
    global _started
    seconds = allowance()
    _started = time.monotonic()
    heartbeat.saving(seconds)
    heartbeat.beat(step)
    collectives.set_timeout(max(seconds, collectives.collective_timeout()))


def under_way() -> bool:
    """Whether a save has begun and not ended (a Trainer's, whose own torch.save calls are part of it)."""
    return _started is not None


def end(step: int, is_main: bool) -> None:
    global _started, _longest
    if _started is None:
        return
    took, _started = time.monotonic() - _started, None
    _longest = max(_longest, took)
    collectives.set_timeout(collectives.collective_timeout())
    heartbeat.saving(None)
    heartbeat.beat(step)
    wait = os.environ.get(STOP_WAIT_ENV)
    if is_main and wait and took > float(wait):
        print(f"slurmgen-train: warning: the checkpoint of step {step} took {took:.0f} s to save, longer than"
              f" the {float(wait):.0f} s ranks get to stop at a time-limit warning: raise --grace",
              file=sys.stderr, flush=True)


def pause_for_test(step: int, is_main: bool) -> None:
    at, _, seconds = os.environ.get(SAVE_SLEEP_ENV, "").partition(":")
    if is_main and at == str(step):
        time.sleep(float(seconds))
