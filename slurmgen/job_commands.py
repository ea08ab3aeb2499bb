"""`slurmgen render`, from the job options' one declaration (`check` and `fit`: check_commands, so
that render builds no option of theirs). Bad input is one line, exit status 2."""

from __future__ import annotations

import os
import shlex
import sys

import click

from slurmgen import render_steps
from slurmgen.errors import fail
from slurmgen.help_sections import section
from slurmgen.options import OneLineCommand, describe_settings, job_options, spec_from_options
from slurmgen.plan.layout import summary
from slurmgen.plan.option_fields import RENDER
from slurmgen.plan.words import SpecError
from slurmgen.uncollected import uncollected
from slurmgen.writing import check_output_path, sibling_path, write_files


def invoked_command(params: dict, output: str = "-") -> str:
    """The script's `# Command:` line: the command that writes it again, from the effective settings,
    so that options typed, a job file (-f), a profile and a slurmgen.Job give the same script."""
    from slurmgen.options import ENTRIES
    from slurmgen.settings_text import command_line

    return command_line(ENTRIES, params, output)


@click.command("render", cls=OneLineCommand)
@section(
    "Script",
    click.option("-o", "--output", default="generated.sh", show_default=True,
                 help="Where to write the script; - for stdout."),
    click.option("--show-config", is_flag=True, help="Print the effective settings as a job file (for -f), with their sources, then stop."),
    click.option("--check", "check_first", is_flag=True,
                 help="Ask the cluster first (as `slurmgen check`); write nothing if the layout cannot run."))
@job_options(RENDER)
@click.pass_context
def render_command(ctx, output, show_config, check_first, **params):
    """\b
    Example: slurmgen render --nodes 4 --gpus 1,1,2,2 -o job.sh -- --max_steps 100 && sbatch job.sh

    Write the sbatch script of a training job: one het component per group of equal nodes, each
    with its own srun and launcher, the training arguments after `--`.
    """
    if show_config:
        click.echo(describe_settings(ctx, params))
        return
    try:
        check_output_path(output)
        spec, snapshot, plan, vetting = render_steps.prepare(spec_from_options(params), output, check_first)
    except SpecError as err:
        fail(str(err))
    to_stdout = output == "-"
    files = _render_files(plan, output, params)
    try:
        notes = render_steps.notes(vetting, plan, list(files.values()), check_first)
    except SpecError as err:
        fail(str(err))
    if check_first:
        from slurmgen.check_commands import layout_alternatives, run_check

        if not run_check(plan, err=to_stdout, alternatives=layout_alternatives(params, spec), vetting=vetting):
            sys.exit(1)
    if spec.offline:
        from slurmgen.site.prefetch import PrefetchError, prefetch

        try:
            prefetch(spec, log=lambda line: click.echo(line, err=True))
        except PrefetchError as err:
            fail(str(err), 1)
    write_files(files, spec.log_dir, snapshot)
    for line in notes:
        click.echo(f"slurmgen: {line}", err=True)
    click.echo(_render_summary(ctx, plan, output, files), err=to_stdout)


def _render_files(plan, output: str, params: dict) -> dict:
    """Path -> text of every file render writes: the script, and with a het sweep or --prep the
    script that submits them (and the prep job) beside it."""
    with uncollected():  # jinja2 and the templates' code: imported where a script is written
        from slurmgen.script.render import needs_submitter, render, render_prep, render_submitter

    text = render(plan, command=invoked_command(params, output))
    if not needs_submitter(plan):
        return {output: text}
    if output == "-":
        fail("-o -: a sweep of heterogeneous jobs or --prep is written to files, with the script that"
             " submits them beside it; give -o FILE")
    files = {output: text}
    prep = sibling_path(output, "prep") if plan.spec.prep else ""
    if prep:
        files[prep] = render_prep(plan)
    files[sibling_path(output, "submit")] = render_submitter(plan, os.path.abspath(output),
                                                              prep and os.path.abspath(prep))
    return files


def _render_summary(ctx, plan, output: str, files: dict) -> str:
    spec = plan.spec
    info = summary(plan)
    profile = ctx.meta.get("slurmgen.profile")
    if profile and profile[1]:
        info += f"\nprofile [{profile[0]}] applied from {profile[1]}"
    if spec.container_image:
        info += (f"\nin the container: every step; on the host, outside it: the batch script's own checks"
                 f" (python -m slurmgen.*), so {spec.python} there must import slurmgen (the job checks first)")
    if len(files) > 1:
        *written, submitter = files
        info += (f"\nwrote {', '.join(written)} and {submitter}; logs go to {spec.log_dir}"
                 f"\nsubmit with: bash {shlex.quote(submitter)}")
    elif output != "-":
        info += f"\nwrote {output}; logs go to {spec.log_dir}\nsubmit with: sbatch {shlex.quote(output)}"
    return info
