"""The commands that follow jobs and compare runs: `slurmgen watch` and `slurmgen report`."""

from __future__ import annotations

import os
import re
import sys

import click

from slurmgen.errors import fail

JOB_ID = re.compile(r"[0-9]+(_[0-9]+)?(\+[0-9]+)?\Z", re.A)


@click.command("watch")
@click.argument("job_ids", nargs=-1, required=True, metavar="JOB_ID...")
@click.option("--output-dir", type=click.Path(file_okay=False), default=None,
              help="The training output directory, for steps and loss from progress.jsonl "
                   "(one job; a sweep's runs name theirs in their logs).")
@click.option("--interval", type=float, default=1.0, show_default=True, help="Seconds between polls.")
@click.option("--timeout", type=float, default=None, help="Give up after this many seconds.")
def watch_command(job_ids, output_dir, interval, timeout):
    """\b
    Example: slurmgen watch 1234 --output-dir run

    Follow JOB_ID until it ends: state, step, loss. Exit 0 only if it COMPLETED.

    A job array or several JOB_IDs (a sweep's het jobs): one line per run until every run has
    ended, then `sweep: N run(s): ...`; exit 0 only if every run COMPLETED.
    """
    from slurmgen.observe.watch import watch
    from slurmgen.observe.watch_sweep import follows_sweep, sweep_ok, sweep_summary, watch_sweep

    for job_id in job_ids:  # scontrol would answer nothing, and the watch print UNKNOWN
        if not JOB_ID.match(job_id):
            fail(f"JOB_ID {job_id!r}: not a Slurm job id; give its number (1234), an array task (1234_7) or a het"
                 " component (1234+1)")
    if not follows_sweep(job_ids):
        state = watch(job_ids[0], output_dir and os.path.abspath(output_dir), interval, timeout)
        click.echo(f"job {job_ids[0]}: {state}")
        sys.exit(0 if state == "COMPLETED" else 1)
    if output_dir:
        fail("--output-dir goes with one job: a sweep's runs name their directories in their logs")
    states, timed_out = watch_sweep(list(job_ids), interval, timeout)
    click.echo(sweep_summary(states, timed_out))
    sys.exit(0 if sweep_ok(states) and not timed_out else 1)


@click.command("report")
@click.argument("run_dirs", nargs=-1, required=True, metavar="RUN_DIR...")
@click.option("-o", "--out", default=None, metavar="DIR",
              help="Where report.html and the PNGs go [default: the one RUN_DIR given, else ./slurmgen-report].")
@click.option("--logs", "logs", multiple=True, metavar="PATH",
              help="Job logs (sbatch --output files), or the --log-dir holding them; repeatable. A log "
                   "belongs to the run whose directory it names (a sweep's run line, or a resume); one that "
                   "names none counts only when one run is reported and it is the only such log. Gives each "
                   "run its job ids, restarts and their causes.")
def report_command(run_dirs, out, logs):
    """\b
    Example: slurmgen report runs/lr-sweep --logs logs

    Compare runs (or a sweep's parent directory): a ranked table here, report.html and PNG plots.
    The page shows each run's context: settings (what differs first), nodes and ranks, start, end
    and wall time, best loss, throughput over the run, interruptions on the loss chart, and goodput:
    the share of the wall time (first to last logged step) spent on steps that were kept.
    """
    from slurmgen.observe import report, report_html

    try:
        runs = report.find_runs(list(run_dirs), list(logs))
        click.echo(report.terminal_table(runs))
        target = out or (run_dirs[0] if len(run_dirs) == 1 else "slurmgen-report")
        written = report_html.write_report(runs, target)
    except report.ReportError as err:
        fail(str(err), 1 if "matplotlib" in str(err) else 2)
    click.echo(f"wrote {', '.join(str(p) for p in written)}")
