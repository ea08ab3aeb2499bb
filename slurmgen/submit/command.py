"""`python -m slurmgen.submit`: the same job as `slurmgen render`, submitted from Python by submitit.

    python -m slurmgen.submit --nodes 4 --gpus 1,1,2,2 [job options] [--folder DIR] \\
        [--detach] [--local] -- TRAINING ARGUMENTS
    python -m slurmgen.submit --attach JOB_ID [--folder DIR]    # follow a detached job

Job options are those of `slurmgen render` (slurmgen.options) that the submit path uses, refused
with the same one-line messages; what only a rendered script does (a launcher, spares, the network
check, ...) it does not offer. Progress (step, loss, throughput) is read from rank 0's
progress.jsonl in the training --output_dir. Exit status: 0 done, 1 the job failed, 2 bad input,
130 Ctrl-C.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Optional

import click

from slurmgen.errors import INTERRUPTED, fail
from slurmgen.options import OneLineCommand, job_options, section, spec_from_options
from slurmgen.plan.option_fields import RENDER, SUBMIT
from slurmgen.plan.spec import JobSpec
from slurmgen.plan.words import SpecError
from slurmgen.site import vet
from slurmgen.snapshot import take
from slurmgen.writing import make_log_dir, undo, write_files

JOB_FAILED = 1


class ProgressPrinter:
    """One line per change when stdout is a file or pipe; one line redrawn in place on a TTY."""

    def __init__(self, out=None):
        self.out = out or sys.stdout
        self.live = self.out.isatty()
        self.drawn = False

    def __call__(self, status) -> None:
        from slurmgen.observe.watch import progress_line

        line = progress_line(status.state, status.progress, status.restarts)
        if status.reason:  # e.g. PartitionNodeLimit: this job will not start as asked
            line += f" (waiting: {status.reason})"
        if self.live:
            self.out.write("\r" + line.ljust(100))
            self.drawn = True
        else:
            self.out.write(line + "\n")
        self.out.flush()

    def end(self) -> None:
        if self.drawn:
            self.out.write("\n")
            self.drawn = False


def describe_layout(spec, local: bool) -> str:
    world = sum(spec.gpus)
    if local:
        return f"{world} processes on this machine"
    return f"{world} tasks on {spec.nodes} nodes ({','.join(map(str, spec.gpus))} GPUs)"


def report_success(sub, metrics: Optional[dict]) -> None:
    path = sub.metrics_file()
    text = path.read_text().rstrip() if path else json.dumps(metrics, indent=2, default=str)
    click.echo(f"rank 0 metrics{f' ({path})' if path else ''}:\n{text}")
    click.echo(f"logs: {sub.folder}/{sub.job_id}_<task>_log.out and .err")
    if sub.output_dir:
        click.echo(f"model and checkpoints: {sub.output_dir}")


def report_failure(err) -> None:
    click.echo(f"slurmgen: {err}", err=True)
    failure = err.failure
    if failure is not None:
        click.echo(f"--- last lines of {failure.stderr} ---", err=True)
        click.echo(failure.tail or "(empty)", err=True)


def follow(sub, printer: ProgressPrinter, interval: float = 1.0, failed: Optional[list] = None,
           watch=None) -> int:
    """Wait for the job (``watch``: the hang watch, at every poll); on Ctrl-C ask whether to
    cancel it. Returns the exit status; a failure (JobFailed) is appended to ``failed``."""
    from slurmgen.submit.submission import JobFailed

    try:
        sub.wait(progress=printer, interval=interval, poll=watch)
    except KeyboardInterrupt:
        printer.end()
        return interrupted(sub)
    printer.end()
    try:
        metrics = sub.result()
    except JobFailed as err:
        report_failure(err)
        if failed is not None:
            failed.append(err)
        return JOB_FAILED
    report_success(sub, metrics)
    return 0


def submit_and_say(spec, folder, local: bool):
    """Submit (a refusal: one line, exit 1) and say which job it is and where its files go."""
    from slurmgen.submit.submission import SubmitError, submit_job

    try:
        sub = submit_job(spec, folder, local=local)
    except SubmitError as err:
        fail(str(err), JOB_FAILED)
    click.echo(f"submitted job {sub.job_id}: {describe_layout(spec, local)}")
    click.echo(f"submitit folder: {sub.folder}")
    return sub


def submit_and_follow(spec, folder, local: bool, interval: float) -> int:
    """Submit, follow (with the hang watch), and after a hang or a crash mid-training submit again, as
    the rendered script requeues, by the same failure policy (slurmgen.submit.resubmit): up to --max-failures,
    the entry points resuming from the newest checkpoint in --output_dir, a node blamed twice excluded.
    A --local run is not retried: it has no nodes to judge or leave out."""
    from slurmgen.submit import resubmit

    retries = resubmit.Retries.of(spec)
    while True:
        sub = submit_and_say(spec, folder, local)
        failed: list = []
        printer = ProgressPrinter()
        watch = sub.hang_watch(spec.hang_timeout, spec.nodes, printer) if spec.hang_timeout and not local else None
        code = follow(sub, printer, interval, failed, watch)
        if not failed or local:
            return code
        step = resubmit.after_failure(spec, sub, failed[0], watch, retries)
        for line in step.lines:  # a retry's line on stdout with the progress; why it stops on stderr
            click.echo(f"slurmgen: {line}", err=step.spec is None)
        if step.spec is None:
            return code
        spec, retries = step.spec, step.retries


# With --attach, only these say where the job is; anything else would be silently ignored.
ATTACH_KEEPS = {"log_dir", "profile"}


def follow_earlier(job_id: str, folder: Optional[str], params: dict, other_mode: bool,
                   interval: float) -> int:
    """--attach: refuse options that would be ignored, find the job, follow it like a new one."""
    from click.core import ParameterSource

    from slurmgen.submit.submission import SubmitError, attach, default_folder

    ctx = click.get_current_context()
    given = ["training arguments" if name == "train_args" else "--" + name.replace("_", "-")
             for name in params if name not in ATTACH_KEEPS
             and ctx.get_parameter_source(name) == ParameterSource.COMMANDLINE]
    if other_mode or given:
        what = "--detach or --local" if other_mode else given[0]
        fail(f"--attach {job_id}: {what} cannot be used with --attach, which follows a job "
             f"already submitted")
    try:
        sub = attach(job_id, folder or default_folder(params["log_dir"]))
    except (SpecError, SubmitError) as err:  # a malformed id, or no such job in that folder
        fail(str(err))
    click.echo(f"following job {sub.job_id}: {sub.world_size} tasks")
    click.echo(f"submitit folder: {sub.folder}")
    return follow(sub, ProgressPrinter(), interval)


def interrupted(sub) -> int:
    try:
        cancel = click.confirm(f"\ncancel job {sub.job_id}?", default=False, err=True)
    except (click.exceptions.Abort, KeyboardInterrupt, EOFError):
        cancel = False
    if cancel:
        sub.cancel()
        click.echo(f"cancelled job {sub.job_id}", err=True)
    else:
        click.echo(f"job {sub.job_id} keeps running; logs in {sub.folder}", err=True)
    return INTERRUPTED


SUBMIT_OPTIONS = section(
    "Submit",
    click.option("--folder", default=None, type=click.Path(file_okay=False),
                 help="submitit folder: job pickles and per-task logs  [default: LOG_DIR/submitit]"),
    click.option("--detach", is_flag=True, help="Print the job id and the submitit folder, then return."),
    click.option("--local", is_flag=True,
                 help="Run here with submitit's local executor: one process per GPU, no Slurm."),
    click.option("--attach", "attach_to", metavar="JOB_ID", default=None,
                 help="Follow a job submitted earlier (e.g. with --detach) to its end, as if just "
                      "submitted; takes no job options, only --folder or --log-dir to find it."),
    click.option("--interval", type=float, default=1.0, show_default=True, help="Seconds between polls."))


@click.command("submit", cls=OneLineCommand, context_settings={"help_option_names": ["-h", "--help"]})
@SUBMIT_OPTIONS
@job_options(SUBMIT)
def submit_command(folder, detach, local, attach_to, interval, **params):
    """\b
    Example: slurmgen submit --nodes 4 --gpus 1,1,2,2 -- --output_dir run --max_steps 100

    Submit the training job through submitit: one Slurm task per GPU, uneven nodes included.

    Training arguments go after `--`; their --output_dir is where progress, metrics and the
    model are read from. Slurm picks how tasks spread over nodes from free GPUs: pin --nodelist
    for an exact split.
    """
    from slurmgen.submit.parameters import check_submittable

    if attach_to is not None:
        sys.exit(follow_earlier(attach_to, folder, params, detach or local, interval))
    try:
        spec = spec_from_options(params)
        check_submittable(spec, click.get_current_context().command_path)  # as typed: slurmgen submit, python -m ...
        vetting = vet.start(spec, ask_cluster=not local)  # the training arguments against their option list
        notes = vetting.judge()  # what would fail after the queue wait: setup lines, GPUs
        spec, snapshot = take(spec, folder)  # the code every run runs (--no-snapshot: none)
    except SpecError as err:
        fail(str(err))
    _can_make(spec.log_dir, folder)
    if vetting.no_model:  # it queues at once: refused, where render only warns
        fail(vetting.no_model)
    for line in notes:
        click.echo(f"slurmgen: {line}", err=True)
    if local and (spec.after or spec.sweep):
        fail(f"{'--sweep' if spec.sweep else '--after'}: not with --local, which runs one job on this machine"
             " without Slurm")
    if spec.offline:  # as `render --offline` does: fill the shared cache here, ranks read it offline
        from slurmgen.site.prefetch import PrefetchError, prefetch

        try:
            prefetch(spec, log=lambda line: click.echo(line, err=True))
        except PrefetchError as err:
            fail(str(err), JOB_FAILED)
    if snapshot:  # copied before anything queues (with the log directory it lies in)
        write_files({}, spec.log_dir, snapshot)
        click.echo(f"code: {snapshot.code.describe()}")
    if spec.sweep:
        sys.exit(submit_sweep_and_follow(spec, folder, interval, detach))
    if not detach:
        sys.exit(submit_and_follow(spec, folder, local, interval))
    submit_and_say(spec, folder, local)


def _can_make(log_dir: str, folder: Optional[str]) -> None:
    """The log directory and submitit's folder must be possible (one line and exit 2 where not);
    submit_job makes them, and removes them again where the submission fails."""
    for option, path in (("--log-dir", log_dir), ("--folder", folder and os.path.expanduser(folder))):
        if path:
            undo(make_log_dir(path, option), path)


def submit_sweep_and_follow(spec, folder, interval: float, detach: bool) -> int:
    """--sweep: one job per run (at most --max-parallel at once), then follow each to its end.
    No retries here: a failed run is reported, and the others go on."""
    from slurmgen.submit.submission import SubmitError, submit_sweep

    try:
        pairs = submit_sweep(spec, folder)
    except SubmitError as err:
        fail(str(err), JOB_FAILED)
    for run, sub in pairs:
        click.echo(f"submitted job {sub.job_id}: run {run.index} ({run.label()}) -> {run.output_dir}")
    click.echo(f"submitit folder: {pairs[0][1].folder}; at most {spec.max_parallel or len(pairs)} at once")
    if detach:
        return 0
    codes = []
    for run, sub in pairs:
        click.echo(f"run {run.index} ({run.label()}), job {sub.job_id}:")
        codes.append(follow(sub, ProgressPrinter(), interval))
        if codes[-1] == INTERRUPTED:
            return INTERRUPTED
    done = sum(code == 0 for code in codes)
    click.echo(f"sweep: {len(codes)} run(s): {done} completed, {len(codes) - done} failed")
    return 0 if done == len(codes) else JOB_FAILED


SUBMIT_ONLY = ("folder", "detach", "local", "interval")


def _every_option_command() -> click.Command:
    """submit's own options and every job option of render: spec_from_args takes a render command
    line too, and refuses what the submit path cannot do (check_submittable) in one line."""
    return click.command("submit", cls=OneLineCommand)(SUBMIT_OPTIONS(job_options(RENDER)(lambda **_: None)))


def spec_from_args(argv) -> "JobSpec":
    """The JobSpec `python -m slurmgen.submit ARGV` would submit, for scripts and notebooks:
    spec_from_args(["--nodes", "4", "--gpus", "1,1,2,2", "--", "--output_dir", "run"]).
    Raises SpecError (or click.UsageError for an unknown option)."""
    from slurmgen.submit.parameters import check_submittable

    ctx = _every_option_command().make_context("python -m slurmgen.submit", list(argv))
    spec = spec_from_options({k: v for k, v in ctx.params.items() if k not in SUBMIT_ONLY})
    check_submittable(spec)
    return spec


def main(argv=None):
    submit_command.main(argv, prog_name="python -m slurmgen.submit")


if __name__ == "__main__":
    main()
