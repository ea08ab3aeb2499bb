"""slurmgen.Job: a training job as a Python object, built from the same one declaration as the
command line's options (the same names, defaults, checks and error lines), that renders the same
script as `slurmgen render`, writes it, and submits it through sbatch or submitit.

    job = slurmgen.Job(nodes=4, gpus=[1, 1, 2, 2], script="train.py", time="2:00:00",
                       args=["--output_dir", "runs/first"])
    print(job.render())                       # the text `slurmgen render` writes for these values
    handle = job.submit(via="sbatch")         # or via="submitit"
    handle.wait(); handle.metrics()           # rank 0's metrics.json

A Job reads no profile (slurmgen.toml): its values are the ones given, and the options' defaults.
A bad value raises JobError, whose message is the line the command line prints after
`slurmgen: error:`. Paths (script, log_dir, the training --output_dir) are taken relative to the
directory the Job is made in, as the command line takes them relative to where it runs."""

from __future__ import annotations

import os
import subprocess
import warnings
from pathlib import Path
from typing import Optional

from slurmgen import job_file
from slurmgen.options import ENTRIES, spec_from_options
from slurmgen.plan.words import SpecError

VIAS = ("sbatch", "submitit")


class JobError(SpecError):
    """A value a job cannot have, or a job that cannot be written or submitted as asked; one line."""


def _checked(step):
    try:
        return step()
    except SpecError as err:
        raise JobError(str(err)) from None


class Job:
    """A job's values: keywords are the long options' names with _ for - (nodes, gpus, log_dir, ...)
    and args for the training arguments; gpus may be a list, env a dict."""

    def __init__(self, **options):
        given = _checked(lambda: job_file.values(ENTRIES, options))
        self._given = given
        self._params = {**{e.option.name: e.default for e in ENTRIES}, job_file.TRAIN_ARGS: (), **given}
        self.spec = _checked(lambda: spec_from_options(self._params))  # JobSpec: validated, paths absolute

    @classmethod
    def from_file(cls, path, **overrides) -> "Job":
        """The job of a job file (`slurmgen render -f`'s), with `overrides` winning as options do."""
        values = _checked(lambda: {**job_file.read(ENTRIES, str(path)), **job_file.values(ENTRIES, overrides)})
        return cls(**values)

    def __getattr__(self, name: str):
        params = self.__dict__.get("_params", {})
        key = job_file.TRAIN_ARGS if name == job_file.ARGS else name
        if key in params:
            return params[key]
        raise AttributeError(f"Job has no option {name!r}")

    def __repr__(self) -> str:
        shown = ", ".join(f"{job_file.ARGS if k == job_file.TRAIN_ARGS else k}={v!r}" for k, v in self._given.items())
        return f"Job({shown})"

    # ------------------------------------------------------------------ text
    def render(self) -> str:
        """The sbatch script, byte for byte what `slurmgen render -o -` writes for these values; as
        that command does, it copies the --script's code snapshot into the log directory."""
        text, copy = self._script("-")
        made = self._make_log_dir()
        self._copy(copy, made)
        return text

    def config(self) -> str:
        """The job file of these values (what `render --show-config` prints): Job.from_file reads it."""
        from slurmgen.settings_text import job_file as as_file

        return as_file(ENTRIES, self._params, {name: "given" for name in self._given})

    def write(self, path) -> Path:
        """Write the script to `path` (whole or not at all) and make the log directory, as render
        does; returns the path. The script's `# Command:` line then names `-o path`."""
        from slurmgen.writing import check_output_path, undo, write_atomically

        path = str(path)
        text, copy = self._script(path)  # refused before anything is made
        self._prefetch()
        made = self._make_log_dir()  # Slurm opens the log before the job starts
        self._copy(copy, made)
        try:
            check_output_path(path)
            write_atomically(path, text)
        except SpecError as err:
            undo(made, self.spec.log_dir)
            raise JobError(str(err)) from None
        except OSError as err:
            undo(made, self.spec.log_dir)
            raise JobError(f"-o {path!r}: cannot write it: {err.strerror or err}") from None
        return Path(path)

    def _prefetch(self) -> None:
        """With offline=True, the Hub's models and datasets fetched here now, as render fetches them:
        the nodes will not reach the Hub."""
        if not self.spec.offline:
            return
        import sys

        from slurmgen.site.prefetch import PrefetchError, prefetch

        try:
            prefetch(self.spec, log=lambda line: print(f"slurmgen: {line}", file=sys.stderr))
        except PrefetchError as err:
            raise JobError(str(err)) from None

    def _make_log_dir(self) -> str:
        """The log directory; returns the outermost directory made now ("" if it was there), for undo."""
        from slurmgen.writing import made_dirs

        return _checked(lambda: made_dirs(self.spec.log_dir))

    def _copy(self, copy, made: str) -> None:
        """The code snapshot (slurmgen.snapshot.Copy), unless there is none or it is there already."""
        from slurmgen.writing import undo

        try:
            if copy is not None:
                copy.write()
        except SpecError as err:  # slurmgen.snapshot.SnapshotError
            undo(made, self.spec.log_dir)
            raise JobError(str(err)) from None

    def _script(self, output: str):
        """The script's text for -o output, and the code snapshot it runs (None: none)."""
        from slurmgen import render_steps
        from slurmgen.script.render import needs_submitter, render
        from slurmgen.settings_text import command_line

        _, copy, plan, vetting = _checked(lambda: render_steps.prepare(self.spec, output))
        if needs_submitter(plan):
            vetting.close()
            raise JobError("a sweep of heterogeneous jobs or --prep is several scripts and the one that submits"
                           " them: write its job file (Job.config()) and use slurmgen render -f FILE -o FILE")
        text = render(plan, command=command_line(ENTRIES, self._params, output))
        for line in _checked(lambda: render_steps.notes(vetting, plan, [text])):  # what render refuses or says
            warnings.warn(f"slurmgen: {line}", stacklevel=3)
        return text, copy

    # ------------------------------------------------------------------ submit
    def submit(self, via: str = "sbatch", path=None, folder: Optional[str] = None):
        """Submit the job; returns its handle at once (job_id, state(), wait(), cancel(), metrics()).
        via="sbatch": the rendered script, written to `path` (default LOG_DIR/JOB_NAME.sh) and given
        to sbatch from here (the job's working directory). via="submitit": the submit path, one
        Slurm task per GPU, its files in `folder` (default LOG_DIR/submitit)."""
        if via not in VIAS:
            raise JobError(f"via={via!r}: give one of {', '.join(map(repr, VIAS))}")
        if via == "submitit":
            from slurmgen.submit.submission import submit_job

            from slurmgen.snapshot import take

            spec, copy = _checked(lambda: take(self.spec, folder))  # the code every run runs, as submit's
            self._copy(copy, self._make_log_dir())
            return _checked(lambda: submit_job(spec, folder))
        return self._sbatch(str(path or os.path.join(self.spec.log_dir, f"{self.spec.job_name}.sh")))

    def _sbatch(self, path: str):
        from slurmgen.observe.batch_job import BatchJob
        from slurmgen.submit.parameters import resolve_output_dir

        self.write(path)
        try:
            proc = subprocess.run(["sbatch", "--parsable", path], capture_output=True, text=True)
        except OSError as err:
            raise JobError(f"sbatch: {err.strerror or err} (is Slurm installed here?)") from None
        if proc.returncode != 0:
            said = (proc.stderr.strip().splitlines() or ["no reason given"])[-1]
            raise JobError(f"sbatch {path}: {said}")
        job_id = proc.stdout.strip().split(";")[0]  # "ID" or "ID;CLUSTER"
        return BatchJob(job_id, Path(path).resolve(), resolve_output_dir(self.spec.train_args))


def attach(job_id):
    """The handle of a job submitted earlier (from Python or the command line), found from its id as
    `slurmgen status` finds it: a rendered script's job -> BatchJob, a submitted one -> Submission.
    JobError (one line) for an id that is not a slurmgen job's."""
    from slurmgen.observe.job_life import LifeError, find

    try:
        found = find(str(job_id), need_slurm=False)
    except LifeError as err:
        raise JobError(str(err)) from None
    entry = found.entry
    if entry.kind == "submitted":
        from slurmgen.submit.submission import attach as attach_submitted

        return _checked(lambda: attach_submitted(entry.job_id, Path(entry.task_logs).parent))
    from slurmgen.life_commands import script_output_dir
    from slurmgen.observe.batch_job import BatchJob

    workdir = (found.records or [{}])[0].get("WorkDir", "")
    return BatchJob(entry.job_id, Path(entry.command), script_output_dir(entry, workdir))
