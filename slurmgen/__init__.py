"""slurmgen: correct multi-node, multi-GPU training scripts for Slurm, uneven clusters included.

The Python API, `slurmgen.Job` (and its `slurmgen.JobError`), `slurmgen.attach(job_id)` and
`slurmgen.run(fn, ...)`, is imported on first use: `import slurmgen` stays as light as
`slurmgen render` must be on a login node."""

__version__ = "0.2.0"
__all__ = ["Job", "JobError", "attach", "run", "__version__"]


def __getattr__(name: str):
    if name in ("Job", "JobError", "attach"):
        from slurmgen import job_api

        return getattr(job_api, name)
    if name == "run":
        from slurmgen.run_api import run

        return run
    raise AttributeError(f"module 'slurmgen' has no attribute {name!r}")
