"""The submit path: the same job submitted from Python through submitit, and its tasks.

`python -m slurmgen.submit` runs slurmgen.submit.command; spec_from_args is its
Python entry for scripts and notebooks."""

from slurmgen.submit.command import main, spec_from_args, submit_command

__all__ = ["main", "spec_from_args", "submit_command"]
