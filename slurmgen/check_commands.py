"""The job commands that ask before anything is queued: `slurmgen check` (can the layout run here,
where, and would the script fail) and `slurmgen fit` (what fits on the GPUs), from the job options'
one declaration. Bad input is one line, exit status 2."""

from __future__ import annotations

import sys

import click

from slurmgen.errors import fail
from slurmgen.help_sections import section
from slurmgen.options import OneLineCommand, job_options, spec_from_options
from slurmgen.plan.layout import materialize
from slurmgen.plan.option_fields import CHECK, FIT
from slurmgen.plan.words import SpecError, train_arg
from slurmgen.render_steps import node_gpus
from slurmgen.site import vet
from slurmgen.site.auto_request import auto_alternatives


def judge(vetting, scripts, resume_advice: bool = True, places: bool = True) -> list:
    """The vetting's verdict: one line and exit 2 for a value that would fail after the queue wait;
    else the notes to show."""
    try:
        return vetting.judge(scripts, resume_advice, places)
    except SpecError as err:
        fail(str(err))


def layout_alternatives(params: dict, spec) -> list:
    """The other layouts --gpus auto considered (label, spec), for their start estimates."""
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
    sys.exit(0 if run_check(plan, alternatives=layout_alternatives(params, spec), vetting=vetting) else 1)


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
