"""What a user's own training script gets in a slurmgen job, without changing a line.

train/rank_hooks/sitecustomize.py (first on the ranks' PYTHONPATH) calls these when the script
first imports the piece they hook; slurmgen's own entry points do all of it themselves and run
without them.

  * start: the stack dump on the hang watch's signal (train.heartbeat.install);
  * after torch.optim.optimizer is imported: the forward passes timed for the straggler watch
    (train.compute_time, where the job asks for it), and a beat at every optimizer step of any optimizer (torch's
    global post-step hook), so the hang watch, the retries' "training had begun" rule and
    `slurmgen watch` see any PyTorch loop advance (the step in the beat counts optimizer steps
    since the process started; at most one beat per BEAT_SECONDS). Progress is any work: a forward
    pass beats too (the same step: an evaluation, a generation, a long gradient accumulation is no
    hang), and torch.save (and, once imported, torch.distributed.checkpoint.save) is a save, with a
    save's allowance (train.saves), however long it takes;
  * after transformers.trainer is imported: train.trainer_hooks.

Only the standard library and train.heartbeat here: this is imported before the script runs.
"""

from __future__ import annotations

import os
import sys
import time

from train import compute_time, heartbeat

# A beat is a file write: at most one per this many seconds (the hang watch counts tens of seconds),
# so a loop of millisecond steps does not pay for one per step; the step in the file may lag by
# as much. SLURMGEN_BEAT_SECONDS=0: every step.
BEAT_SECONDS = float(os.environ.get("SLURMGEN_BEAT_SECONDS") or 0.5)
_steps = 0
_last_beat = float("-inf")
# Set by train.trainer_hooks: a Trainer's callback beats with its global step instead.
trainer_beats = False
_failed = False  # a beat that cannot be written is said once; training goes on


def is_rank() -> bool:
    """A rank, not torchrun's agent nor a tool the script runs (they have no RANK)."""
    return "RANK" in os.environ


def start() -> None:
    if is_rank():
        heartbeat.install()


def after_optimizer_import(module) -> None:
    if is_rank():
        import torch
        from torch.nn.modules import module as modules

        module.register_optimizer_step_post_hook(_after_step)
        modules.register_module_forward_hook(_after_forward)
        torch.save = _as_a_save(torch.save)
        compute_time.install()


def after_checkpoint_import(module) -> None:
    if is_rank() and hasattr(module, "save"):
        module.save = _as_a_save(module.save)


def _ours(name: str):
    """slurmgen's train.NAME, whatever `train` means to the script (the rank hooks' loader)."""
    import importlib

    loader = sys.modules.get("sitecustomize")
    return loader.ours(name) if hasattr(loader, "ours") else importlib.import_module(f"train.{name}")


def _as_a_save(save):
    """save, bracketed as a checkpoint save (train.saves: its allowance in the beat), unless one is under
    way already (a Trainer's, which calls it for each of its files)."""
    import functools

    saves = _ours("saves")

    @functools.wraps(save)
    def a_save(*args, **kwargs):
        if saves.under_way() or not is_rank():
            return save(*args, **kwargs)
        saves.begin(_steps)
        try:
            return save(*args, **kwargs)
        finally:
            saves.end(_steps, os.environ.get("RANK") == "0")
    return a_save


def _after_forward(module, args, output) -> None:
    """Any forward pass is progress: a beat (at most one per BEAT_SECONDS), the optimizer steps so far."""
    _after_step(None, None, None, advance=False)


def _after_step(optimizer, args, kwargs, advance: bool = True) -> None:
    global _steps, _failed, _last_beat
    _steps += advance
    now = time.monotonic()
    if trainer_beats or _failed or now - _last_beat < BEAT_SECONDS:
        return
    _last_beat = now
    try:
        heartbeat.beat(_steps)
    except OSError as exc:
        _failed = True
        print(f"slurmgen rank hooks: cannot write the heartbeat ({exc}); the hang watch will not see this rank",
              file=sys.stderr, flush=True)
