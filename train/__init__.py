"""Training entry points launched by slurmgen's scripts (independent of slurmgen itself).

    python -m train.tiny OUT          tiny offline model, tokenizer and data assets
    python -m train.sft ...           TRL SFTTrainer
    python -m train.classify ...      transformers.Trainer sequence classification
    python -m train.ddp_loop ...      plain PyTorch DDP loop

Each ``main(argv) -> dict`` also runs in process. Ranks come from train.distenv (torchrun or
one Slurm task per GPU), checkpoints from train.checkpoint (complete or ignored).

What the entry points share, one concern per module:

    train.cli           UsageError and one-line errors (exit 2), renamed options
    train.hub           model paths: local dir or hub id, cached when offline
    train.data          data set paths, loading, required columns
    train.devices       CUDA, hardware bf16, bitsandbytes, this rank's device
    train.collectives   the process group, barrier, broadcast
    train.stop          the stop protocol: stop file, SIGTERM, outcome file
    train.outputs       log lines, resume choice, progress.jsonl, metrics.json
    train.program       run_main and exit_after: running and leaving as a program
"""
