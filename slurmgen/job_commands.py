"""The job commands: `slurmgen render`, `check` and `fit`, from the job options' one declaration.
Bad input is one line, exit status 2."""

from __future__ import annotations

import os
import shlex
import sys

import click

from slurmgen import render_steps
from slurmgen.errors import fail
from slurmgen.help_sections import section
from slurmgen.options import OneLineCommand, describe_settings, job_options, spec_from_options
from slurmgen.site import vet
from slurmgen.site.auto_request import auto_alternatives
from slurmgen.plan.layout import materialize, summary
from slurmgen.render_steps import node_gpus
from slurmgen.plan.option_fields import CHECK, FIT, RENDER
from slurmgen.plan.words import SpecError, train_arg
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
    if check_first and not run_check(plan, err=to_stdout, alternatives=_alternatives(params, spec), vetting=vetting):
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


def judge(vetting, scripts, resume_advice: bool = True, places: bool = True) -> list:
    """The vetting's verdict: one line and exit 2 for a value that would fail after the queue wait;
    else the notes to show."""
    try:
        return vetting.judge(scripts, resume_advice, places)
    except SpecError as err:
        fail(str(err))


def _render_files(plan, output: str, params: dict) -> dict:
    """Path -> text of every file render writes: the script, and with a het sweep or --prep the
    script that submits them (and the prep job) beside it."""
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


def _alternatives(params: dict, spec) -> list:
    try:
        return auto_alternatives(params, spec)
    except SpecError as err:
        fail(str(err), 1)


def run_check(plan, err=False, alternatives=(), vetting=None) -> bool:
    """The verdict, then (when the layout can run) Slurm's start estimate for it and for the
    other layouts --gpus auto considered (label, spec). vetting: its training arguments' findings
    (no model, the parser's refusal) fail the check too."""
    from datetime import datetime

    from slurmgen.script.render import render
    from slurmgen.site import estimate
    from slurmgen.site.check import assess
    from slurmgen.site.cluster import ClusterError, query

    try:
        cluster = query()
    except ClusterError as error:
        fail(f"cannot ask the cluster: {error}", 1)
    verdict = assess(plan, cluster)
    if vetting:
        verdict = vetting.findings(verdict)
    if plan.spec.gpu_mem and train_arg(plan.spec.train_args, "--model_name_or_path", "--model-name-or-path"):
        verdict = _fit_check(plan.spec, verdict)
    if plan.spec.script:
        verdict = _read_script(plan.spec.script, verdict, cpu_only=not any(n.gpus for n in cluster.nodes),
                               resume_auto=plan.spec.resume == "auto", gpus=node_gpus(plan))
    click.echo(verdict.text(), err=err)
    if verdict.ok:
        now = datetime.now()
        click.echo(f"start (sbatch --test-only): {estimate.ask(render(plan)).describe(now)}", err=err)
        for label, spec in alternatives:
            click.echo(f"alternative {label}: {estimate.ask(render(materialize(spec))).describe(now)}", err=err)
    return verdict.ok


def _fit_check(spec, verdict):
    """With --gpu-mem and a model, the strategy the training arguments choose must fit."""
    from slurmgen.site import fit, fit_text

    try:
        result = fit.assess_spec(spec)
    except fit.FitError as err:
        fail(str(err))
    verdict.add([fit_text.verdict_line(result)], "" if result.chosen.fits else
                "the layout can run, but the model does not fit it with these training arguments")
    return verdict


def _read_script(script: str, verdict, cpu_only: bool, resume_auto: bool = False, gpus: tuple[int, ...] = ()):
    """The script's lines that would fail every rank after the queue wait fail the check too; a
    run that would never resume is said, and fails nothing."""
    from slurmgen.site.user_script import read

    reading = read(script, cpu_only, resume_auto, gpus)
    head = reading.note or (f"script {script}: {len(reading.findings)} line(s) would fail on every rank:"
                            if reading.findings else f"script {script}: nothing found that would fail")
    verdict.add([head, *(f"  {line}" for line in reading.findings)], "" if not reading.findings else
                "the layout can run, but the script would fail on every rank after the queue wait")
    if reading.advice:
        verdict.add([f"  {line}" for line in reading.advice], "")
    return verdict


@click.command("check", cls=OneLineCommand)
@job_options(CHECK)
def check_command(**params):
    """\b
    Example: slurmgen check --nodes 4 --gpus 1,1,2,2 --script train.py

    Say whether the layout can run on this cluster, where, and if not why; with --script, also
    what in the script would fail on every rank. Exit 0 yes, 1 no.
    """
    try:
        spec = spec_from_options(params)
        vetting = vet.start(spec, parse_args=True)
    except SpecError as err:
        fail(str(err))
    from slurmgen.script.render import render

    plan = materialize(spec)
    # --script's reading says what never resumes; the verdict, what a partition lacks
    judge(vetting, [render(plan)], resume_advice=False, places=False)
    sys.exit(0 if run_check(plan, alternatives=_alternatives(params, spec), vetting=vetting) else 1)


@click.command("fit", cls=OneLineCommand)
@section("Fit", click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON."))
@job_options(FIT)
def fit_command(as_json, **params):
    """\b
    Example: slurmgen fit --nodes 4 --gpus 1,1,2,2 --gpu-mem 80G -- --model_name_or_path M

    Say what would fit before queueing: GiB per GPU and per node for each strategy (DDP, LoRA,
    QLoRA, FSDP, CPU offload), from the model's config.json alone, and the training arguments of
    the one to use. Exit 0 when something fits, 1 when nothing does.
    """
    from slurmgen.site import fit, fit_text

    try:
        spec = spec_from_options(params)
        if not spec.gpu_mem:
            raise SpecError("give the GPUs' memory: --gpu-mem SIZE (80G), or one per node like --gpus")
        result = fit.assess_spec(spec)
    except (SpecError, fit.FitError) as err:
        fail(str(err))
    click.echo(fit_text.as_json(result) if as_json else fit_text.table(result))
    if spec.spares and not as_json:
        click.echo(fit_text.spares_line(result, spec.spares, max(spec.gpus)))
    sys.exit(0 if result.ok else 1)
