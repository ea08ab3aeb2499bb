"""Training entry points launched by slurmgen's scripts (independent of slurmgen itself).

    python -m train.tiny OUT          tiny offline model, tokenizer and data assets
    python -m train.sft ...           TRL SFTTrainer
    python -m train.classify ...      transformers.Trainer sequence classification
    python -m train.ddp_loop ...      plain PyTorch DDP loop

Each ``main(argv) -> dict`` also runs in process. Ranks come from train.distenv (torchrun or
one Slurm task per GPU), checkpoints from train.checkpoint (complete or ignored).
"""
