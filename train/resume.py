"""Whether a resume continues exactly as the uninterrupted run would have: the one job-log line
that says so, or why not (verdict), and the test hook that stops a run at a chosen step.

Exact means: with the same arguments, world size and machine type, the per-step losses after a
resume (from a stop at a time limit or preemption, or from the last periodic checkpoint after a
crash) equal those of a run that was never interrupted, bit for bit on CPUs. What can break it is
named in the line: another world size (each rank's share of the data and its random state follow
from its rank), a checkpoint without the random state, data not skipped (--ignore_data_skip), a
logged loss that averages several steps (--logging_steps > 1: the first one after a resume
averages fewer), and GPUs without deterministic algorithms (their kernels may sum in another order).

Test hook: SLURMGEN_TEST_STOP_AT=STEP makes rank 0 create the stop file (SLURMGEN_STOP_FILE) at
step STEP, just before the ranks agree whether to stop: the stop protocol of a time-limit or
preemption warning, at an exact step.
"""

from __future__ import annotations

import os

from train import outputs
from train.contract import STOP_FILE_ENV
from train.distenv import DistEnv

STOP_AT_ENV = "SLURMGEN_TEST_STOP_AT"


def stop_here_for_test(step: int, is_main: bool) -> None:
    at, path = os.environ.get(STOP_AT_ENV), os.environ.get(STOP_FILE_ENV)
    if is_main and at and path and str(step) == at:
        open(path, "a").close()


def verdict(denv: DistEnv, step: int, reasons: list[str], restored: str) -> str:
    """The line for the job log (rank 0 says it)."""
    if reasons:
        line = (f"resume from step {step} is not exact (the losses after it may differ from an uninterrupted run's): "
                + "; ".join(reasons))
    else:
        line = f"resume from step {step} is exact: {restored}"
    outputs.say(denv, line)
    return line


def common_reasons(saved_world_size: int | None, world_size: int, logging_steps: int, device_type: str,
                   ddp_rebuilds: bool = False) -> list[str]:
    """What breaks exactness in every entry point. ddp_rebuilds: DDP lays its gradient buckets out
    again after a run's first step (find_unused_parameters off, the entry points' default)."""
    import torch

    reasons = []
    if saved_world_size is not None and saved_world_size != world_size:
        reasons.append(f"the checkpoint was written by {saved_world_size} rank(s), this run has {world_size}: each"
                       " rank's share of the data and its random state follow from its rank")
    if logging_steps > 1:
        reasons.append(f"--logging_steps {logging_steps}: the first logged loss after the resume averages fewer"
                       " steps (each step's own loss is unchanged)")
    if ddp_rebuilds and world_size > 2:
        reasons.append(f"DDP with {world_size} ranks: the first step after a resume sums the gradients in buckets laid out"
                       " in parameter order, the uninterrupted run's in the order DDP saw them ready, so in another"
                       " order (the last float bits of the losses may differ); --ddp_find_unused_parameters true keeps"
                       " one layout and makes it exact")
    if device_type == "cuda" and not torch.are_deterministic_algorithms_enabled():
        reasons.append("on GPUs without deterministic algorithms (torch.use_deterministic_algorithms, or"
                       " --full_determinism with train.sft and train.classify) kernels may sum in another order")
    return reasons


def hf_reasons(args, checkpoint_dir: str, world_size: int) -> tuple[list[str], str]:
    """For train.sft and train.classify (the HF Trainer restores the data position and each process's
    random state itself): what in the arguments or the checkpoint breaks it, and what is restored."""
    import glob

    files = glob.glob(os.path.join(checkpoint_dir, "rng_state*.pth"))
    saved = len(files) if files else None
    rebuilds = not args.fsdp and not args.ddp_find_unused_parameters
    reasons = common_reasons(saved, world_size, args.logging_steps, args.device.type, rebuilds)
    if not files:
        reasons.append("the checkpoint has no random state (rng_state*.pth)")
    if args.ignore_data_skip:
        reasons.append("--ignore_data_skip: the resumed epoch starts again from its first batch")
    restored = f"data skipped to the position after step {step_of(checkpoint_dir)}, random state of {world_size} rank(s) restored"
    return reasons, restored


def step_of(checkpoint_dir: str) -> str:
    return os.path.basename(os.path.normpath(checkpoint_dir)).rpartition("-")[2]
