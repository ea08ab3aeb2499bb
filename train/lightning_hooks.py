"""What a user's own Lightning Trainer gets in a slurmgen job (train/rank_hooks/sitecustomize loads this
once lightning.pytorch's or pytorch_lightning's Trainer is imported):

  * a callback that takes slurmgen's stop protocol (train.stop): at the stop file (the time-limit or
    preemption warning) or a SIGTERM, agreed by every rank at the same step, a checkpoint and a
    clean stop; rank 0 then says "stopped STEP" (or "finished STEP") for the job runtime, which
    requeues. The checkpoint is hpc_ckpt_N.ckpt in the Trainer's default_root_dir: where Lightning
    itself resumes from on Slurm when fit() is given no ckpt_path, so the requeued run goes on;
  * Lightning's own Slurm requeue kept out of it: its SLURMEnvironment(auto_requeue=True), chosen
    by the script, would requeue the job on SIGUSR1 beside the job runtime; a handler there first
    makes Lightning leave that signal alone (it registers its requeue only where none is);
  * the stack dump kept: after each fit, validate, test or predict Lightning sets every signal
    handler back to what Python knew, which undoes faulthandler's (train.heartbeat.rearm).

The strategy for uneven layouts is the script's choice (train.lightning): Lightning offers no way to
choose it from outside the script, so `slurmgen check --script` names it before queueing instead.
"""

from __future__ import annotations

import functools
import importlib
import os
import re
import signal
import sys

from train import heartbeat, stop

_term_taken = False  # stop_on_term once per process: it starts a watch thread


def after_trainer_import(module) -> None:
    package = module.__name__.split(".trainer", 1)[0]  # lightning.pytorch or pytorch_lightning (not .trainer)
    callback = _callback_class(importlib.import_module(f"{package}.callbacks").Callback)
    trainer = module.Trainer
    trainer.__init__ = _with_stop(trainer.__init__, callback)
    for name in ("fit", "validate", "test", "predict"):
        setattr(trainer, name, _rearming(getattr(trainer, name)))
    trainer.fit = _reporting(trainer.fit)


def _callback_class(base):
    class StopAtTheWarning(base):
        """The stop file or a SIGTERM: a checkpoint Lightning resumes from, then a stop."""

        def __init__(self):
            super().__init__()
            self.stopped_at = None  # the global step it stopped at

        def on_train_start(self, trainer, pl_module):
            global _term_taken
            if not _term_taken:  # after Lightning's own SIGTERM handler (fit sets it): a TERM is a stop
                _term_taken = True
                stop.stop_on_term()

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if self.stopped_at is None and stop.stop_requested(trainer.is_global_zero):
                trainer.save_checkpoint(next_hpc_checkpoint(trainer.default_root_dir))
                self.stopped_at = trainer.global_step
                trainer.should_stop = True

    return StopAtTheWarning


def _with_stop(init, callback_class):
    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        init(self, *args, **kwargs)
        if os.environ.get(heartbeat.HEARTBEAT_DIR_ENV) and getattr(self, "_slurmgen_stop", None) is None:
            self._slurmgen_stop = callback_class()
            self.callbacks.append(self._slurmgen_stop)
            _keep_requeue_ours(getattr(self.strategy, "cluster_environment", None))
    return __init__


def _keep_requeue_ours(environment) -> None:
    """Lightning's requeue signal, where the script chose SLURMEnvironment(auto_requeue=True): taken first."""
    if type(environment).__name__ != "SLURMEnvironment" or not getattr(environment, "auto_requeue", False):
        return
    signum = environment.requeue_signal
    if signal.getsignal(signum) not in (None, signal.SIG_DFL):
        return
    signal.signal(signum, _not_requeued)
    if os.environ.get("RANK", "0") == "0":
        print(f"slurmgen: Lightning's SLURMEnvironment(auto_requeue=True) would requeue this job on"
              f" {signal.Signals(signum).name} beside slurmgen, which checkpoints and requeues at the time-limit"
              f" warning itself: {signal.Signals(signum).name} is ignored here", file=sys.stderr, flush=True)


def _not_requeued(signum, frame) -> None:
    print(f"slurmgen: {signal.Signals(signum).name} ignored: slurmgen's job runtime requeues this job",
          file=sys.stderr, flush=True)


def _rearming(method):
    @functools.wraps(method)
    def rearmed(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        finally:
            heartbeat.rearm()
    return rearmed


def _reporting(fit):
    @functools.wraps(fit)
    def fit_(self, *args, **kwargs):
        callback = getattr(self, "_slurmgen_stop", None)
        if callback is None:
            return fit(self, *args, **kwargs)
        stop.mark_stoppable()
        result = fit(self, *args, **kwargs)
        if self.is_global_zero:  # for the job runtime: requeue after a stop, not after the end
            stop.report_outcome(callback.stopped_at is not None, self.global_step)
        return result
    return fit_


def next_hpc_checkpoint(folder) -> str:
    """hpc_ckpt_N.ckpt, N one past the newest there: the name Lightning resumes from on Slurm."""
    folder = str(folder)
    taken = [int(m.group(1)) for name in (os.listdir(folder) if os.path.isdir(folder) else [])
             if (m := re.fullmatch(r"hpc_ckpt_(\d+)\.ckpt", name))]
    return os.path.join(folder, f"hpc_ckpt_{max(taken, default=0) + 1}.ckpt")
