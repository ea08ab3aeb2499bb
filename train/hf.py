"""What train.sft and train.classify share around a transformers Trainer.

Callbacks give the HF trainers the same contract as ddp_loop: progress.jsonl, complete-marked
checkpoints, the stop file, and metrics.json at the end.
"""

from __future__ import annotations

import os
import time
from typing import Any

from transformers import TrainerCallback

from train import checkpoint, cli, collectives, devices, heartbeat, outputs, resume, saves, stop
from train.contract import PRECISION_ENV
from train.distenv import DistEnv

# PRECISION_ENV, "bf16" or "fp16": what every GPU of the job supports (the job runtime's preflight,
# from each node's GPU model); a rank whose own GPU has bf16 still trains in fp16 when another lacks it.


def one_precision(args) -> None:
    """An explicit --bf16 on a job with a GPU that lacks it is refused before training."""
    if getattr(args, "bf16", False) and os.environ.get(PRECISION_ENV) == "fp16":
        raise cli.UsageError("--bf16: some of the job's GPUs have no bf16 (the preflight line in the job log"
                             " names them); drop it: every rank trains in fp16")


def capability_defaults(denv: DistEnv) -> dict[str, Any]:
    """Defaults that depend on the machine, set on the parser BEFORE parsing.

    TRL configs default to bf16 and fail in __post_init__ on a machine without bf16
    support, so the choice must be made before the dataclasses are built.
    """
    cuda = devices.cuda_available()
    bf16 = devices.bf16_supported(denv) and os.environ.get(PRECISION_ENV) != "fp16"
    defaults = {
        # Without use_cpu, accelerate on a GPU-less machine sets up no DDP at all: each rank
        # would train alone. gloo explicitly (accelerate would take mpi where torch has it),
        # but only with several ranks: a backend makes accelerate expect a process group.
        "use_cpu": not cuda,
        "ddp_backend": "gloo" if denv.distributed and not cuda else None,
        "bf16": bf16,
        "fp16": cuda and not bf16,  # pre-Ampere GPUs: fp16 mixed precision
        "ddp_timeout": collectives.collective_timeout(),
        # HF turns find_unused_parameters on whenever checkpointing is off: an extra autograd
        # traversal per step for models that use every parameter.
        "ddp_find_unused_parameters": False,
        "report_to": "none",
    }
    if not cuda:
        # TRL turns activation checkpointing on by default, as `trl sft` users expect on GPUs;
        # on CPUs it only costs time: off there unless asked for (--gradient_checkpointing).
        defaults["gradient_checkpointing"] = None
    return defaults


def fsdp_blocks(model) -> list[str]:
    """The classes FSDP shards as units: the model's own (_no_split_modules) except one holding
    the input embeddings (BERT's BertEmbeddings), which accelerate shards again by itself and
    then fails ("Invariant encountered: value was None")."""
    names = list(getattr(model, "_no_split_modules", None) or [])
    embeddings = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    if embeddings is None:
        return names
    holding = {type(m).__name__ for m in model.modules() if m is not embeddings
               and any(child is embeddings for child in m.modules())}
    return [name for name in names if name not in holding]


def sharded_on_cpus(trainer_class):
    """The trainer class, with --fsdp honoured on CPUs too, and FSDP's units chosen (fsdp_blocks).

    accelerate turns the Trainer's FSDP arguments into FSDP only on accelerators: on CPUs (a
    CPU-only partition, the local test cluster) the job would train replicated and say nothing.
    FSDP2 itself runs on CPUs over gloo, so the accelerator is set up for it as it would be on GPUs.
    """

    class Sharded(trainer_class):
        def create_accelerator_and_postprocess(self):
            plugin_args = self.args.fsdp_plugin_args
            if plugin_args is not None and not plugin_args.get("transformer_cls_names_to_wrap"):
                blocks = fsdp_blocks(self.model)
                if blocks:
                    plugin_args["transformer_cls_names_to_wrap"] = ",".join(blocks)
            super().create_accelerator_and_postprocess()
            if self.args.fsdp_plugin_args is None or self.is_fsdp_enabled:
                return
            from accelerate.state import PartialState
            from accelerate.utils import DistributedType, FullyShardedDataParallelPlugin

            state = self.accelerator.state
            if state.distributed_type != DistributedType.MULTI_CPU:
                return
            state.fsdp_plugin = FullyShardedDataParallelPlugin(**self.args.fsdp_plugin_args)
            # accelerate keeps the type twice, and reads it back from the process-wide copy
            state.distributed_type = PartialState._shared_state["distributed_type"] = DistributedType.FSDP
            self.is_fsdp_enabled = True

    Sharded.__name__ = Sharded.__qualname__ = trainer_class.__name__
    return Sharded


def count_tokens_by_default(args, argv: list[str]) -> None:
    """Count non-padding tokens (for tokens_per_second) unless the user chose otherwise.

    Not a parser default: the flag parses as a bool, and argparse would run a string
    default through that conversion.
    """
    given = any(a.split("=", 1)[0].replace("-", "_") == "--include_num_input_tokens_seen" for a in argv)
    if not given:
        args.include_num_input_tokens_seen = "non_padding"


def parse_or_usage_error(parser, parse):
    """Parse with one-line errors: HF parsers raise ValueError for unknown or invalid
    arguments (and argparse would print its whole usage text)."""
    cli.one_line_parser_errors(parser)
    try:
        return parse()
    except ValueError as exc:
        raise cli.UsageError(str(exc).strip().splitlines()[0]) from None


def global_batch(args) -> int:
    return args.per_device_train_batch_size * args.gradient_accumulation_steps * max(args.world_size, 1)


class ContractCallback(TrainerCallback):
    """progress.jsonl, checkpoint markers and the stop file for an HF Trainer."""

    def __init__(self, denv: DistEnv, progress: outputs.ProgressLog, keep: int | None = None):
        self.denv = denv
        self.progress = progress
        self.keep = keep  # the user's save_total_limit: old checkpoints go after the new one is marked
        self.stopped_at: int | None = None
        self.t_begin = self.t_end = 0.0
        self.step_begin = 0
        self.tokens_begin = 0
        self.tokens_end = 0

    def on_train_begin(self, args, state, control, **kwargs):
        self.progress.max_steps = state.max_steps
        self.step_begin = state.global_step
        self.tokens_begin = state.num_input_tokens_seen
        self.progress.start(state.global_step)
        heartbeat.beat(state.global_step)  # loaded: from here on a rank that does not advance is a hang
        self.t_begin = time.time()

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "loss" in logs:
            extra = {"learning_rate": logs["learning_rate"]} if "learning_rate" in logs else {}
            self.progress.log(state.global_step, logs["loss"], **extra)

    def on_step_end(self, args, state, control, **kwargs):
        # Every rank gets here at every optimizer step, so the all_reduce inside lines up.
        resume.stop_here_for_test(state.global_step, self.denv.is_main)
        if state.global_step < state.max_steps and stop.stop_requested(self.denv.is_main):
            self.stopped_at = state.global_step
            control.should_save = True
            control.should_training_stop = True
        if control.should_save:  # the Trainer saves right after this (having evaluated first, if due)
            saves.begin(state.global_step)
        else:
            heartbeat.beat(state.global_step)
        return control

    def on_step_begin(self, args, state, control, **kwargs):
        saves.end(state.global_step, self.denv.is_main)  # a save the Trainer decided against (save_strategy="best")

    def on_prediction_step(self, args, state, control, **kwargs):
        heartbeat.beat(state.global_step)  # a long evaluation is not a hang

    def on_save(self, args, state, control, **kwargs):
        saves.pause_for_test(state.global_step, state.is_world_process_zero)
        # The marker goes in last, once every rank has written its part (e.g. RNG state).
        collectives.barrier()
        if state.is_world_process_zero:
            checkpoint.mark_complete(
                checkpoint.checkpoint_path(args.output_dir, state.global_step), state.global_step
            )
            if self.stopped_at == state.global_step:  # the stop's checkpoint is whole: said now, not
                stop.report_outcome(True, state.global_step)  # after a teardown that may still fail
            checkpoint.prune(args.output_dir, self.keep, protect=state.best_model_checkpoint)
        saves.end(state.global_step, state.is_world_process_zero)

    def on_train_end(self, args, state, control, **kwargs):
        saves.end(state.global_step, state.is_world_process_zero)
        self.t_end = time.time()
        self.tokens_end = state.num_input_tokens_seen


def train_and_finish(trainer, denv: DistEnv, extra_after=None,
                     data_prep_seconds: float | None = None) -> dict[str, Any]:
    """Resume if possible, train, then write metrics. ``extra_after(stopped)`` adds metrics."""
    args = trainer.args
    progress = outputs.ProgressLog(args.output_dir, denv, args.max_steps, global_batch(args))
    # transformers deletes old checkpoints right after writing a new one, before the callback
    # marks it complete: a kill in between would leave none. The callback rotates instead.
    keep, args.save_total_limit = args.save_total_limit, None
    cb = ContractCallback(denv, progress, keep)
    trainer.add_callback(cb)

    chosen = outputs.decide_resume(args.output_dir, denv, fallback=args.resume_from_checkpoint)
    if chosen is not None:
        resume.verdict(denv, chosen[0], *resume.hf_reasons(args, chosen[1], denv.world_size))
    result = trainer.train(resume_from_checkpoint=None if chosen is None else chosen[1])
    state = trainer.state
    stopped = cb.stopped_at is not None
    extra = extra_after(stopped) if extra_after else {}
    tokens = cb.tokens_end - cb.tokens_begin if args.include_num_input_tokens_seen != "no" else None
    return outputs.finish(
        args.output_dir,
        denv,
        global_step=state.global_step,
        start_step=cb.step_begin,
        resumed_from_step=None if chosen is None else chosen[0],
        progress=progress,
        train_loss=result.training_loss if state.global_step > cb.step_begin else None,
        elapsed=max(cb.t_end - cb.t_begin, 0.0),
        global_batch=global_batch(args),
        tokens=tokens,
        stopped_early=stopped,
        model=trainer.model,
        extra=extra,
        data_prep_seconds=data_prep_seconds,
    )


def touch_distributed(args) -> None:
    """Bring up the process group (accelerate does it on first device access)."""
    _ = args.device
    if os.environ.get("SLURMGEN_DEBUG"):
        print(f"{outputs.LOG_PREFIX} device {args.device}", flush=True)
