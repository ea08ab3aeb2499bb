"""Each rank's compute time per optimizer step, for slurmgen's straggler watch (SLURMGEN_STRAGGLER_WINDOW
steps, set by the job runtime when the watch is on; without it nothing here runs).

Synchronous training runs every rank at the slowest one's pace: each step ends in the gradient
all-reduce, where the fast ranks wait for the slow one, so the step time is the same everywhere and
says nothing. The forward pass holds no such wait (under DDP), so its time is the rank's own: a
node with a throttled GPU or CPU, or a noisy neighbour, takes longer there than the others. It is
timed around the outermost module call that is not a DDP or FSDP wrapper (DDP's forward may
broadcast buffers, a collective), with grad enabled (not evaluation), and on CUDA with events, read
back a step later so that nothing waits for them. The rank's figure is the median over the window:
a slow node is slow at every step, while a healthy rank's forward of a few milliseconds that the
kernel paused for another process is slow at a few (on a busy host a healthy rank's mean over 20
steps reached 3.2x the median rank's).
(Under FSDP the forward gathers parameters, a collective: the figure then holds waits too.)"""

from __future__ import annotations

import collections
import os
import time

from train import contract

WINDOW_ENV = contract.STRAGGLER_WINDOW_ENV
WRAPPERS = ("DistributedDataParallel", "FullyShardedDataParallel")

_window: collections.deque | None = None  # seconds per optimizer step, the last WINDOW of them
_pending = 0.0  # forward seconds since the last optimizer step
_events: list = []  # (start, end) CUDA events of those forwards
_depth = 0
_began = 0.0
_torch = None


def install() -> None:
    """Time every forward from now on (once per process; only where the job asks for it)."""
    global _window, _torch
    try:
        window = int(os.environ.get(WINDOW_ENV) or 0)
    except ValueError:
        window = 0
    if window < 1 or _window is not None:
        return
    import torch
    from torch.nn.modules import module
    from torch.optim import optimizer

    _torch, _window = torch, collections.deque(maxlen=window)
    module.register_module_forward_pre_hook(_before)
    module.register_module_forward_hook(_after, always_call=True)
    optimizer.register_optimizer_step_post_hook(_step)


def figure() -> float | None:
    """Median compute seconds per step over a full window, else None."""
    if _window is None or len(_window) < _window.maxlen:
        return None
    import statistics  # here: the rank hooks import this module in every rank, the watch is off in most

    return statistics.median(_window)


def _counts(module) -> bool:
    return type(module).__name__ not in WRAPPERS and _torch.is_grad_enabled()


def _before(module, args) -> None:
    global _depth, _began
    if not _counts(module):
        return
    _depth += 1
    if _depth == 1:
        if _torch.cuda.is_available() and _torch.cuda.is_initialized():
            start = _torch.cuda.Event(enable_timing=True)
            start.record()
            _events.append([start, None])
        else:
            _began = time.perf_counter()


def _after(module, args, output) -> None:
    global _depth, _pending
    if not _counts(module) or _depth == 0:
        return
    _depth -= 1
    if _depth == 0:
        if _events and _events[-1][1] is None:
            end = _torch.cuda.Event(enable_timing=True)
            end.record()
            _events[-1][1] = end
        else:
            _pending += time.perf_counter() - _began


def _step(optimizer, args, kwargs) -> None:
    """An optimizer step closes the rank's step: its forwards' time joins the window."""
    global _pending, _depth
    seconds = _pending
    for start, end in _events:
        if end is not None:
            end.synchronize()  # long done: the backward and the step came after it
            seconds += start.elapsed_time(end) / 1e3
    _events.clear()
    _window.append(seconds)
    _pending, _depth = 0.0, 0
