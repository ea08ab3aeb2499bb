"""slurmgen: correct multi-node, multi-GPU training scripts for Slurm, uneven clusters included."""

__version__ = "0.2.0"
