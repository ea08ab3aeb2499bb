"""The commands of a job's life after submission: `slurmgen status`, `logs`, `cancel` and `list`, for
a rendered script's job and a submitted one alike (slurmgen.observe.job_life finds the job). Unknown
job ids and a missing Slurm are one line, exit status 2."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Optional

import click

from slurmgen.errors import fail

SETTINGS = {"help_option_names": ["-h", "--help"]}


def _slurm() -> None:
    if shutil.which("scontrol") is None:
        fail("no Slurm here: scontrol is not on PATH (run this where you submit jobs)")


def _found(job_id: str, need_slurm: bool = True):
    """The job, or one line and exit 2 (a bad id, a job nobody knows, no Slurm where it is needed)."""
    from slurmgen.observe.job_life import LifeError, find

    try:
        return find(job_id, need_slurm)
    except LifeError as err:
        fail(str(err))


@click.command("status", context_settings=SETTINGS)
@click.argument("job_ids", nargs=-1, metavar="[JOB...]")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per job, in a list, for scripts.")
def status_command(job_ids, as_json):
    """\b
    Example: slurmgen status 1234 --json

    Each JOB's state (with the reason while it is pending), rank 0's step and loss, restarts and
    runs, the nodes it runs on and those it left out, where its logs and its folder are. Without
    JOB: your slurmgen jobs that Slurm still shows."""
    from slurmgen.observe.job_life import human, view

    _slurm()
    found = [_found(j) for j in job_ids] or _current()
    views = [view(f, script_output_dir(f.entry, (f.records or [{}])[0].get("WorkDir", ""))) for f in found]
    click.echo(json.dumps(views, indent=1) if as_json else "\n".join(human(v) for v in views) or "no slurmgen jobs")


def script_output_dir(entry, workdir: str = "") -> Optional[Path]:
    """Where rank 0 writes its progress: the entry's, else a rendered script's --output_dir (its TARGET)."""
    if entry.output_dir:
        return Path(entry.output_dir)
    if entry.kind != "rendered":
        return None
    import shlex

    from slurmgen.plan.words import train_arg

    try:
        text = Path(entry.command).read_text(errors="replace")
    except OSError:
        return None
    line = next((l for l in text.splitlines() if l.startswith("TARGET=(") and l.endswith(")")), "")
    try:
        found = train_arg(shlex.split(line[len("TARGET=("):-1]), "--output_dir", "--output-dir")
    except ValueError:
        return None
    return Path(workdir or ".", found) if found else None


def _current() -> list:
    """The user's slurmgen jobs Slurm still holds (not ended), newest first."""
    from slurmgen.job import index
    from slurmgen.observe.job_life import Found
    from slurmgen.site.jobs import job_records

    found = [Found(e, job_records(e.job_id)) for e in index.entries(index.cluster_name())[:50]]
    return [f for f in found if f.records and not f.ended()]


@click.command("logs", context_settings=SETTINGS)
@click.argument("job_id", metavar="JOB")
@click.option("--rank", type=int, default=None, metavar="R", help="Rank R's output (default: the job's own log).")
@click.option("-f", "--follow", is_flag=True, help="Keep printing new lines until the job has ended.")
@click.option("--interval", type=float, default=1.0, show_default=True, help="Seconds between looks while following.")
def logs_command(job_id, rank, follow, interval):
    """\b
    Example: slurmgen logs 1234 --rank 3 --follow

    A submitted job's rank R has its own files; a rendered job's ranks share the job log, of which
    --rank R shows the lines labelled [rankR]: (see the job-life guide)."""
    from slurmgen.observe.job_logs import follow as show, select

    found = _found(job_id, need_slurm=False)
    try:
        selection = select(found.entry, rank)
    except ValueError as err:
        fail(str(err))
    if not any(p.exists() for p in selection.paths) and not follow:
        fail(f"job {job_id}: no log yet at {', '.join(map(str, selection.paths))} (is it still pending?)", 1)

    def ended() -> bool:
        from slurmgen.site.jobs import job_records

        found.records = job_records(job_id) if shutil.which("scontrol") else []
        return found.ended()
    written = show(selection, ended, sys.stdout, interval, once=not follow)
    if rank is not None and not written and selection.label:
        click.echo(f"slurmgen: no line of job {job_id}'s log is labelled {selection.label} (see the job-life guide:"
                   " rendered jobs label rank lines with torchrun's --tee)", err=True)


@click.command("cancel", context_settings=SETTINGS)
@click.argument("job_id", metavar="JOB")
def cancel_command(job_id):
    """\b
    Example: slurmgen cancel 1234

    Final, for a rendered job and a submitted one alike: the job is marked cancelled in its folder
    before scancel, so neither its runtime nor its ranks requeue it, whatever they were doing."""
    from slurmgen.observe.job_life import CancelRefused, cancel_for_good

    found = _found(job_id)
    try:
        click.echo(cancel_for_good(found))
    except CancelRefused as err:
        fail(str(err), 1)


@click.command("list", context_settings=SETTINGS)
@click.option("-n", "--last", type=click.IntRange(1), default=20, show_default=True, help="How many, newest first.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per job, in a list.")
def list_command(last, as_json):
    """\b
    Example: slurmgen list --last 5

    Your slurmgen jobs on this cluster, rendered and submitted, newest first: their state, the runs
    the job runtime began and the restarts Slurm counted."""
    from slurmgen.job import index
    from slurmgen.observe.job_life import listing, table
    from slurmgen.site.jobs import job_records

    _slurm()
    rows = listing(index.cluster_name(), job_records, last)
    click.echo(json.dumps(rows, indent=1) if as_json else table(rows) if rows else f"no slurmgen jobs in {index.root()}")
