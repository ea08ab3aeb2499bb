"""What a user's own Hugging Face Trainer gets in a slurmgen job (train/rank_hooks/sitecustomize
loads this once transformers.trainer is imported): every Trainer, SFTTrainer and TRL's other
trainers too, gets train.hf's ContractCallback, as train.sft does: progress.jsonl with loss and
learning rate, the complete marker on each checkpoint, and at the stop file (the time-limit or
preemption warning) a checkpoint at the current step and a clean stop. `train()` resumes from the
newest complete checkpoint when the job says --resume auto (before a checkpoint the script names,
as train.sft does), or when the script passes resume_from_checkpoint=True (also on a first run,
where the Trainer alone would fail).
"""

from __future__ import annotations

import functools
import os

from train import checkpoint, collectives, contract, heartbeat, hf, outputs, script_hooks, stop
from train.distenv import DistEnv

RESUME_ENV = contract.RESUME_ENV  # "auto": resume from the newest complete checkpoint


def after_trainer_import(module) -> None:
    trainer = module.Trainer
    trainer.__init__ = _with_contract(trainer.__init__)
    trainer.train = _resuming(trainer.train)


def _with_contract(init):
    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        init(self, *args, **kwargs)
        if os.environ.get(heartbeat.HEARTBEAT_DIR_ENV) and getattr(self, "_slurmgen_contract", None) is None:
            self._slurmgen_contract = _contract(self)
    return __init__


def _contract(trainer) -> hf.ContractCallback:
    """The callback on a user's Trainer. Old checkpoints are rotated by it, after the new one is
    marked complete (the Trainer's own rotation deletes first)."""
    denv = DistEnv.from_environ(os.environ)
    args = trainer.args
    keep, args.save_total_limit = args.save_total_limit, None
    progress = outputs.ProgressLog(args.output_dir, denv, args.max_steps, hf.global_batch(args))
    callback = hf.ContractCallback(denv, progress, keep)
    trainer.add_callback(callback)
    stop.stop_on_term()  # SIGTERM checkpoints too, as in the entry points
    script_hooks.trainer_beats = True
    return callback


def _resuming(train):
    @functools.wraps(train)
    def train_(self, resume_from_checkpoint=None, *args, **kwargs):
        callback = getattr(self, "_slurmgen_contract", None)
        if callback is None:
            return train(self, resume_from_checkpoint, *args, **kwargs)
        auto = os.environ.get(RESUME_ENV) == "auto"
        if resume_from_checkpoint is True or (auto and resume_from_checkpoint in (None, False)):
            resume_from_checkpoint = _newest_complete(self.args.output_dir, callback.denv)
        elif auto and isinstance(resume_from_checkpoint, str):  # the run's own progress first, as train.sft
            resume_from_checkpoint = _newest_complete(self.args.output_dir, callback.denv) or resume_from_checkpoint
        stop.mark_stoppable()
        result = train(self, resume_from_checkpoint, *args, **kwargs)
        stopped, step = callback.stopped_at is not None, self.state.global_step
        if stopped:
            outputs.say(callback.denv, f"stop requested, saved checkpoint at step {step}")
        if callback.denv.is_main:  # for the batch script: requeue after a stop, not after the end
            stop.report_outcome(stopped, step)
        return result
    return train_


def _newest_complete(output_dir: str, denv: DistEnv) -> str | None:
    """The newest checkpoint in output_dir with slurmgen's complete marker, agreed by all ranks;
    unmarked ones are left where they are (they may be the user's own)."""
    found = checkpoint.latest_complete(output_dir) if denv.is_main and os.path.isdir(output_dir) else None
    found = collectives.broadcast_object(None if found is None else str(found[1]))
    outputs.say(denv, f"resuming from {found}" if found else f"no complete checkpoint in {output_dir}: fresh start")
    return found
