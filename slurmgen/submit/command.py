"""`python -m slurmgen.submit`: the same job as `slurmgen render`, submitted from Python by submitit.

    python -m slurmgen.submit --nodes 4 --gpus 1,1,2,2 [job options] [--folder DIR] \\
        [--detach] [--local] -- TRAINING ARGUMENTS
    python -m slurmgen.submit --attach JOB_ID [--folder DIR]    # follow a detached job

Job options are the very ones of `slurmgen render` (slurmgen.options), refused with the same
one-line messages. Progress (step, loss, throughput) is read from rank 0's progress.jsonl in
the training --output_dir. Exit status: 0 done, 1 the job failed, 2 bad input, 130 Ctrl-C.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import Optional

import click
import cloup

from slurmgen.errors import INTERRUPTED, OneLineCommand, fail
from slurmgen.options import job_options, spec_from_options
from slurmgen.plan.spec import JobSpec
from slurmgen.plan.words import SpecError

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


def next_exclusion(history: list, exclude, gpus, partition) -> tuple[str, list[str], bool]:
    """For the submit path's retries: the --exclude value (the user's and the nodes to avoid), the
    nodes new in it, and whether the partition can still hold one node per GPU count in gpus."""
    import hostlist
    from slurmgen.job import slurm
    from slurmgen.job.retry import to_exclude

    user = hostlist.expand_hostlist(exclude) if exclude else []
    avoid = to_exclude(history, [])
    new = [n for n in avoid if n not in user]
    names = sorted(set(user) | set(avoid))
    fits = not new or slurm.fits_without([(g, 1) for g in gpus], partition or "", names)
    return hostlist.collect_hostlist(names) if names else None, new, fits


def submit_and_follow(spec, folder, local: bool, interval: float) -> int:
    """Submit, follow (with the hang watch), and after a hang or a crash mid-training submit
    again (up to --max-failures), as the rendered script requeues: the entry points resume from
    the newest checkpoint in --output_dir, and a node blamed for two failures is excluded."""
    from slurmgen.job.record import Failure
    from slurmgen.job.slurm import node_name

    history: list[Failure] = []
    while True:
        sub = submit_and_say(spec, folder, local)
        failed: list = []
        printer = ProgressPrinter()
        watch = sub.hang_watch(spec.hang_timeout, spec.nodes, printer) if spec.hang_timeout and not local else None
        code = follow(sub, printer, interval, failed, watch)
        if not failed or local:
            return code
        why = "hang" if watch is not None and watch.hung else "crash"
        progress = sub.status().progress
        if why == "crash" and (not progress or float(progress.get("time", 0)) < sub.submitted_at):
            return code  # failed before a training step: a retry would fail the same way
        if why == "hang":
            host = watch.suspect
        else:
            host = sub.crashed_host() or (failed[0].failure.host if failed[0].failure else None)
        host = node_name(host or "", [])  # Slurm's name: ranks and torchrun may report another
        history.append(Failure(why, host))
        if len(history) > spec.max_failures:
            click.echo(f"slurmgen: failure {len(history)} ({why}): no retry left (--max-failures {spec.max_failures})",
                       err=True)
            return code
        exclude, new, fits = next_exclusion(history, spec.exclude, spec.gpus, spec.partition)
        where = f" on {host}" if host else ""
        if not fits:
            click.echo(f"slurmgen: failure {len(history)} ({why}{where}); without {exclude} the partition "
                       "cannot hold the layout any more: not retrying", err=True)
            return code
        click.echo(f"slurmgen: failure {len(history)} of at most {spec.max_failures} ({why}{where}): submitting "
                   "again to resume from the newest checkpoint"
                   + (f"; excluding {', '.join(new)} (2nd failure there)" if new else ""))
        # Pinned nodes (--nodelist, --gpus auto) must give way to the exclusion: Slurm places the job anew.
        pins = () if set(spec.nodelist) & set(new) else spec.nodelist
        spec = dataclasses.replace(spec, exclude=exclude, nodelist=pins)


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


@click.command("submit", cls=OneLineCommand, context_settings={"help_option_names": ["-h", "--help"]},
               short_help="Submit the job from Python (submitit) and follow it to its end.")
@cloup.option_group(
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
@job_options
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
        check_submittable(spec)
    except SpecError as err:
        fail(str(err))
    if local and (spec.after or spec.sweep):
        fail(f"{'--sweep' if spec.sweep else '--after'}: not with --local, which runs one job on this machine"
             " without Slurm")
    if spec.offline:  # as `render --offline` does: fill the shared cache here, ranks read it offline
        from slurmgen.site.prefetch import PrefetchError, prefetch

        try:
            prefetch(spec, log=lambda line: click.echo(line, err=True))
        except PrefetchError as err:
            fail(str(err), JOB_FAILED)
    if spec.sweep:
        sys.exit(submit_sweep_and_follow(spec, folder, interval, detach))
    if not detach:
        sys.exit(submit_and_follow(spec, folder, local, interval))
    submit_and_say(spec, folder, local)


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


def spec_from_args(argv) -> "JobSpec":
    """The JobSpec `python -m slurmgen.submit ARGV` would submit, for scripts and notebooks:
    spec_from_args(["--nodes", "4", "--gpus", "1,1,2,2", "--", "--output_dir", "run"]).
    Raises SpecError (or click.UsageError for an unknown option)."""
    from slurmgen.submit.parameters import check_submittable

    ctx = submit_command.make_context("python -m slurmgen.submit", list(argv))
    spec = spec_from_options({k: v for k, v in ctx.params.items() if k not in SUBMIT_ONLY})
    check_submittable(spec)
    return spec


def main(argv=None):
    submit_command.main(argv, prog_name="python -m slurmgen.submit")


if __name__ == "__main__":
    main()
