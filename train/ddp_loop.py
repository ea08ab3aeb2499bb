"""A plain PyTorch DDP training loop for a causal LM: no Trainer, every step visible.

    python -m train.ddp_loop --model_name_or_path OUT/lm --dataset OUT/data/text.jsonl \\
        --output_dir RUN --max_steps 20 --save_steps 10 --batch_size 8 --lr 3e-3

Process group from the environment (train.distenv: torchrun or one Slurm task per GPU),
nccl on CUDA and gloo on CPU, DistributedSampler with set_epoch, rank 0 logs and saves,
resume from the newest complete checkpoint, stop file honoured at every step. A resume is exact
(train.resume): the data continues at the next batch of its epoch, and every rank's random state
(python, numpy, torch) comes back from the checkpoint; data loader workers draw from generators
seeded per batch (train.rng.SeededBatches).
Runs as a single process without any launcher too. With --fsdp the model is sharded instead
(torch's fully_shard on each transformer block, then the whole model): each rank holds its share
of the parameters, gradients and optimizer state; checkpoints are gathered into the same format.

Checkpoint format: ``checkpoint-N/`` holds the model and tokenizer in HF format plus
``trainer.pt`` (optimizer state, step, world size, seed, batch size, and every rank's random
state); the data position follows from the step.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import time
from pathlib import Path

from train import (checkpoint, cli, collectives, data, devices, distenv, heartbeat, hub, outputs, program, resume,
                   rng, saves, stop)

RENAMED = {
    **cli.RENAMED_ARGS,
    "max_seq_length": "use --max_length",
    "dataset_text_field": cli.TEXT_FIELD_MOVED,
    "dataset_name": "use --dataset",
    "evaluation_strategy": "train.ddp_loop does not evaluate (use --eval_strategy with train.sft or train.classify)",
}
STATE_FILE = "trainer.pt"


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = arg_parser()
    cli.one_line_parser_errors(p)
    args = p.parse_args(argv)
    for name in ("max_steps", "save_steps", "batch_size", "logging_steps", "max_length"):
        if getattr(args, name) <= 0:
            raise cli.UsageError(f"--{name} must be positive, got {getattr(args, name)}")
    if args.dataloader_num_workers < 0:
        raise cli.UsageError(f"--dataloader_num_workers must be 0 or more, got {args.dataloader_num_workers}")
    return args


def arg_parser() -> argparse.ArgumentParser:
    """This entry point's command line (its option list: train.args_check)."""
    p = argparse.ArgumentParser(prog="python -m train.ddp_loop", description=__doc__.split("\n")[0])
    p.add_argument("--model_name_or_path", required=True)
    p.add_argument("--dataset", required=True, help="hub name or local .jsonl/.json/.parquet/.arrow file or dir")
    p.add_argument("--text_column", default="text")
    p.add_argument("--output_dir", required=True)
    p.add_argument("--max_steps", type=int, default=100)
    p.add_argument("--save_steps", type=int, default=50)
    p.add_argument("--save_total_limit", type=int, default=None)
    p.add_argument("--batch_size", type=int, default=8, help="per rank")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--weight_decay", type=float, default=0.0)
    p.add_argument("--max_length", type=int, default=256)
    p.add_argument("--logging_steps", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dataloader_num_workers", type=int, default=0, help="data loader worker processes per rank")
    p.add_argument("--use_cpu", action="store_true", help="train on CPU even where CUDA is available")
    p.add_argument("--fsdp", action="store_true", help="shard the model over the ranks (FSDP2) instead of DDP")
    p.add_argument("--ddp_find_unused_parameters", type=cli.boolean, default=False, metavar="true|false",
                   help="DDP keeps its first gradient buckets (a resume with more than two ranks is then bit for bit)")
    return p


def check_args(argv: list[str]) -> None:
    """The command line as a job would read it, before the queue wait (train.args_check)."""
    parse_args(argv)


@contextlib.contextmanager
def main_first(denv: distenv.DistEnv):
    """Rank 0 runs the body first (filling caches), then the others."""
    if not denv.is_main:
        collectives.barrier()
    yield
    if denv.is_main:
        collectives.barrier()


def tokenized_dataset(args, tokenizer):
    ds = data.load_data(args.dataset)
    data.require_columns(ds, args.dataset, [args.text_column])
    eos = tokenizer.eos_token or ""

    def tokenize(batch):
        texts = [t + eos for t in batch[args.text_column]]
        return tokenizer(texts, truncation=True, max_length=args.max_length)

    return ds.map(tokenize, batched=True, remove_columns=ds.column_names, desc="tokenize")


class SkipSampler:
    """Yields a sampler's indices after the first ``skip`` ones (resume mid-epoch)."""

    def __init__(self, sampler, skip: int):
        self.sampler, self.skip = sampler, skip

    def __iter__(self):
        return itertools.islice(iter(self.sampler), self.skip, None)

    def __len__(self):
        return max(len(self.sampler) - self.skip, 0)


def make_collate(tokenizer):
    def collate(rows):
        batch = tokenizer.pad(rows, return_tensors="pt")
        labels = batch["input_ids"].clone()
        labels[batch["attention_mask"] == 0] = -100  # no loss on padding
        batch["labels"] = labels
        return batch

    return collate


def shard(model) -> None:
    """FSDP2: each transformer block (the model's _no_split_modules) its own unit, then the rest."""
    from torch.distributed.fsdp import fully_shard

    blocks = set(getattr(model, "_no_split_modules", None) or [])
    for module in [m for m in model.modules() if type(m).__name__ in blocks]:
        fully_shard(module)
    fully_shard(model)


def full_states(model, optimizer, sharded: bool) -> tuple[dict | None, dict]:
    """The model's and optimizer's whole state, on every rank's CPU (a collective when sharded;
    the model's None when not: save_pretrained reads it from the model itself)."""
    if not sharded:
        return None, optimizer.state_dict()
    from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict,
                                                         get_optimizer_state_dict)

    whole = StateDictOptions(full_state_dict=True, cpu_offload=True)
    return get_model_state_dict(model, options=whole), get_optimizer_state_dict(model, optimizer, options=whole)


def load_optimizer(model, optimizer, state: dict, sharded: bool) -> None:
    if not sharded:
        optimizer.load_state_dict(state)
        return
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    set_optimizer_state_dict(model, optimizer, state, options=StateDictOptions(full_state_dict=True))


def save(args, denv, model, tokenizer, optimizer, step: int, sharded: bool = False) -> None:
    """Rank 0 writes the checkpoint into a staging dir; it appears complete or not at all. The
    others wait for it in a barrier, all of them in the save's phase (train.saves)."""
    import torch

    saves.begin(step)
    model_state, optimizer_state = full_states(model, optimizer, sharded)
    random_states = rng.gather()  # every rank's, written by rank 0
    if denv.is_main:
        with checkpoint.staged_checkpoint(args.output_dir, step) as tmp:
            model.save_pretrained(tmp, state_dict=model_state)
            tokenizer.save_pretrained(tmp)
            torch.save({"optimizer": optimizer_state, "step": step, "world_size": denv.world_size,
                        "seed": args.seed, "batch_size": args.batch_size, "rng": random_states},
                       Path(tmp) / STATE_FILE)
            saves.pause_for_test(step, denv.is_main)
        checkpoint.prune(args.output_dir, args.save_total_limit)
    collectives.barrier()
    saves.end(step, denv.is_main)


def exact_resume(args, denv, state: dict, device, per_epoch: int) -> None:
    """This rank's random state back from the checkpoint, and the job-log line on exactness."""
    saved = state.get("rng")
    rebuilds = not args.fsdp and not args.ddp_find_unused_parameters
    reasons = resume.common_reasons(state.get("world_size"), denv.world_size, args.logging_steps, device.type, rebuilds)
    for name in ("seed", "batch_size"):
        if state.get(name, getattr(args, name)) != getattr(args, name):
            reasons.append(f"--{name} {getattr(args, name)}, the checkpoint's run had {state[name]}")
    if saved is None:
        reasons.append("the checkpoint has no random state (written before slurmgen saved it)")
    elif len(saved) == denv.world_size:
        rng.restore(saved[denv.rank])
    epoch, batch = divmod(state["step"], per_epoch)
    resume.verdict(denv, state["step"], reasons,
                   f"data from batch {batch} of epoch {epoch} on every rank, random state of {denv.world_size}"
                   " rank(s) restored")


def _main(argv: list[str]) -> dict | None:
    cli.reject_old_args(argv, RENAMED)
    denv = distenv.setup()
    args = parse_args(argv)
    hub.check_model_path(args.model_name_or_path)
    data.check_data_path(args.dataset, "--dataset")
    collectives.collective_timeout()  # a bad value is a usage error now, not a crash at init

    import torch
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader, DistributedSampler
    from transformers import AutoModelForCausalLM, AutoTokenizer

    device = torch.device("cpu") if args.use_cpu else devices.device_for(denv)
    collectives.init_process_group(denv, device)
    try:
        rng.seed_all(args.seed)
        chosen = outputs.decide_resume(args.output_dir, denv)

        tokenizer = AutoTokenizer.from_pretrained(args.model_name_or_path)
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        t_prep = time.perf_counter()
        with main_first(denv):
            ds = tokenized_dataset(args, tokenizer)
        data_prep_seconds = time.perf_counter() - t_prep

        # Resuming loads the weights from the checkpoint itself (HF format).
        source = chosen[1] if chosen else args.model_name_or_path
        model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32).to(device)
        sharded = args.fsdp and denv.distributed
        if sharded:
            shard(model)
        ddp = (DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None,
                                       find_unused_parameters=args.ddp_find_unused_parameters)
               if denv.distributed and not sharded else model)
        optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
        step, state = 0, None
        if chosen:
            state = torch.load(Path(chosen[1]) / STATE_FILE, map_location=device, weights_only=False)
            load_optimizer(model, optimizer, state["optimizer"], sharded)
            step = state["step"]
        start_step = step

        sampler = DistributedSampler(ds, num_replicas=denv.world_size, rank=denv.rank,
                                     shuffle=True, seed=args.seed, drop_last=True)
        per_epoch = len(sampler) // args.batch_size
        if per_epoch == 0:
            raise cli.UsageError(
                f"data set {args.dataset} has {len(ds)} rows: too few for batch size {args.batch_size} "
                f"on {denv.world_size} ranks")
        collate = make_collate(tokenizer)
        global_batch = args.batch_size * denv.world_size
        progress = outputs.ProgressLog(args.output_dir, denv, args.max_steps, global_batch)
        progress.start(step)
        heartbeat.beat(step)  # loaded: from here on a rank that does not advance is a hang

        if state is not None:  # last: the random state is that of the end of the checkpoint's step
            exact_resume(args, denv, state, device, per_epoch)
        ddp.train()
        tokens = torch.zeros(1, dtype=torch.int64, device=device)
        loss_sum = torch.zeros(1, dtype=torch.float64, device=device)
        stopped = False
        t0 = time.time()
        epoch, done_in_epoch = divmod(step, per_epoch)
        while step < args.max_steps and not stopped:
            sampler.set_epoch(epoch)  # a new shuffle each epoch, the same on every rank
            # Own generators (the loader's, and the workers' per batch): the global random state,
            # which dropout draws from, is not touched by starting an epoch or a resumed one.
            loader = DataLoader(
                rng.SeededBatches(ds, args.seed, epoch, denv.rank), collate_fn=collate,
                batch_sampler=rng.SeededBatches.batches(SkipSampler(sampler, done_in_epoch * args.batch_size),
                                                        args.batch_size, first=done_in_epoch),
                num_workers=args.dataloader_num_workers,
                generator=torch.Generator().manual_seed(rng.derived(args.seed, epoch, denv.rank)))
            for batch in data.batches(loader, step):
                batch = {k: v.to(device) for k, v in batch.items()}
                loss = ddp(**batch).loss
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                step += 1
                tokens += batch["attention_mask"].sum()
                loss_sum += loss.detach()

                if step % args.logging_steps == 0 or step == args.max_steps:
                    mean = loss.detach().clone()
                    if denv.distributed:
                        torch.distributed.all_reduce(mean)
                        mean /= denv.world_size
                    progress.log(step, mean.item(), learning_rate=optimizer.param_groups[0]["lr"])
                resume.stop_here_for_test(step, denv.is_main)
                stopped = step < args.max_steps and stop.stop_requested(denv.is_main)
                heartbeat.beat(step)
                if stopped or step % args.save_steps == 0 or step == args.max_steps:
                    save(args, denv, model, tokenizer, optimizer, step, sharded)
                if stopped and denv.is_main:  # the stop's checkpoint is whole: said now, not after a
                    stop.report_outcome(True, step)  # teardown that may still fail
                if stopped or step >= args.max_steps:
                    break
            epoch, done_in_epoch = epoch + 1, 0
        elapsed = time.time() - t0

        if denv.distributed:
            torch.distributed.all_reduce(tokens)
            torch.distributed.all_reduce(loss_sum)
        steps_run = step - start_step
        train_loss = loss_sum.item() / (steps_run * denv.world_size) if steps_run else None
        return outputs.finish(
            args.output_dir, denv,
            global_step=step, start_step=start_step,
            resumed_from_step=chosen[0] if chosen else None,
            progress=progress,
            train_loss=train_loss,
            elapsed=elapsed, global_batch=global_batch,
            tokens=int(tokens.item()), stopped_early=stopped, model=model,
            data_prep_seconds=data_prep_seconds,
        )
    finally:
        collectives.destroy_process_group()


def main(argv: list[str] | None = None) -> dict | None:
    """Run the DDP loop; returns the metrics dict (also written to output_dir/metrics.json)."""
    return program.run_main(_main, argv)


if __name__ == "__main__":
    program.exit_after(main)
