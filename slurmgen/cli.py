"""`slurmgen` command line: render, check, fit, watch, report. Bad input is one line, exit status 2."""

from __future__ import annotations

import os
import re
import shlex
import sys

import click
import cloup

from slurmgen import __version__
from slurmgen.errors import OneLineGroup, fail
from slurmgen.options import describe_settings, job_options, spec_from_options
from slurmgen.site import vet
from slurmgen.site.auto_request import auto_alternatives
from slurmgen.plan.layout import materialize, summary
from slurmgen.plan.option_fields import CHECK, FIT, RENDER
from slurmgen.plan.words import SpecError, compact_gpus, train_arg
from slurmgen.snapshot import take as take_snapshot
from slurmgen.submit import submit_command
from slurmgen.writing import check_output_path, sibling_path, write_files


def invoked_command(argv=None) -> str:
    """The command for the script's header, with a long --gpus list in its compact form."""
    from slurmgen.script.render import command_word  # jinja2: only where a script is written

    args = list(sys.argv[1:] if argv is None else argv)
    for i, arg in enumerate(args):
        if arg in ("--gpus", "-G") and i + 1 < len(args):
            args[i + 1] = compact_gpus(args[i + 1])
        elif arg.startswith("--gpus="):
            args[i] = "--gpus=" + compact_gpus(arg[len("--gpus="):])
    return " ".join(command_word(word) for word in ["slurmgen", *args])


@click.group(cls=OneLineGroup, invoke_without_command=True,
             context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="slurmgen")
@click.pass_context
def cli(ctx):
    """Correct multi-node, multi-GPU training jobs for Slurm, uneven clusters included.

    \b
      slurmgen render --nodes 4 --gpus 1,1,2,2 -o job.sh -- --model_name_or_path M && sbatch job.sh

    Shell completion: eval "$(_SLURMGEN_COMPLETE=bash_source slurmgen)" in ~/.bashrc
    (zsh_source for ~/.zshrc, fish_source for fish).
    """
    if ctx.invoked_subcommand is None:  # a bare `slurmgen` is asking what there is
        click.echo(ctx.get_help())


@cli.command("render", short_help="Write the sbatch script of a training job.")
@cloup.option_group(
    "Script",
    click.option("-o", "--output", default="generated.sh", show_default=True,
                 help="Where to write the script; - for stdout."),
    click.option("--show-config", is_flag=True, help="Print the effective settings and their sources, then stop."),
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
        spec = spec_from_options(params)
        vetting = vet.start(spec, parse_args=check_first)  # the training arguments' parser: --check only
        spec, snapshot = take_snapshot(spec, output)  # measured now, copied with the script (write_files)
    except SpecError as err:
        fail(str(err))
    plan = materialize(spec)
    to_stdout = output == "-"
    files = _render_files(plan, output)
    notes = judge(vetting, list(files.values()))
    if vetting.no_model and not check_first:  # --check fails with it instead
        notes.insert(0, f"warning: {vetting.no_model}")
    if check_first and not run_check(plan, err=to_stdout, alternatives=_alternatives(params, spec), vetting=vetting):
        sys.exit(1)
    if spec.script and not check_first:  # --check reads the whole script
        from slurmgen.site.user_script import layout_limits

        notes += [f"warning: {line}" for line in layout_limits(spec.script, node_gpus(plan))]
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


def judge(vetting, scripts, resume_advice: bool = True) -> list:
    """The vetting's verdict: one line and exit 2 for a value that would fail after the queue wait;
    else the notes to show."""
    try:
        return vetting.judge(scripts, resume_advice)
    except SpecError as err:
        fail(str(err))


def _render_files(plan, output: str) -> dict:
    """Path -> text of every file render writes: the script, and with a het sweep or --prep the
    script that submits them (and the prep job) beside it."""
    from slurmgen.script.render import needs_submitter, render, render_prep, render_submitter

    text = render(plan, command=invoked_command())
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


def node_gpus(plan) -> tuple[int, ...]:
    """The job's GPUs per node, in node-rank order (1,1,2,2)."""
    return tuple(len(ranks) for _, ranks in plan.node_ranks())


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


@cli.command("check", short_help="Say whether the layout can run on this cluster, and where.")
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
    judge(vetting, [render(plan)], resume_advice=False)  # --script's reading says what never resumes
    sys.exit(0 if run_check(plan, alternatives=_alternatives(params, spec), vetting=vetting) else 1)


@cli.command("fit", short_help="Say what would fit on the GPUs before queueing.")
@cloup.option_group("Fit", click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON."))
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


JOB_ID = re.compile(r"[0-9]+(_[0-9]+)?(\+[0-9]+)?\Z", re.A)


@cli.command("watch", short_help="Follow a job (or a sweep's jobs) to its end: state, step, loss.")
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


@cli.command("report", short_help="Compare runs: a ranked table, report.html and plots.")
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


# `slurmgen submit` is `python -m slurmgen.submit`, the one command.
cli.add_command(submit_command, "submit")


def main():
    cli(prog_name="slurmgen")  # also as `python -m slurmgen`, and for completion's _SLURMGEN_COMPLETE


if __name__ == "__main__":
    main()
