"""The steps from a job's validated spec to its script and the notes on it, shared by `slurmgen
render` and slurmgen.Job so that both refuse, warn and snapshot alike. Refusals are SpecError (one
line); each caller says them its own way (exit 2, JobError)."""

from __future__ import annotations

from slurmgen.plan.layout import materialize
from slurmgen.site import vet


def prepare(spec, output: str, parse_args: bool = False):
    """(spec with its code snapshot, the snapshot's Copy or None, the plan, the vetting). The vetting
    starts first: its sinfo runs, and the bash that parses the script starts, while the rest is done
    (notes() gives it the script; vetting.close() where none comes). parse_args: the training
    arguments' parser too (render --check)."""
    vetting = vet.start(spec, parse_args=parse_args, scripts=True)
    copy = None
    try:
        if spec.script is not None:  # the snapshot code only where there is code (issue 43: ~2.5 ms a render)
            from slurmgen.snapshot import take

            spec, copy = take(spec, output)  # measured now, copied with the script
        return spec, copy, materialize(spec), vetting
    except BaseException:
        vetting.close()
        raise


def notes(vetting, plan, texts: list, check_first: bool = False) -> list:
    """The lines to show beside a written script ("warning: ..." and advice), after the vetting's
    refusals (SpecError) of a value that would fail after the queue wait."""
    found = vetting.judge(texts, True, True)
    if vetting.no_model and not check_first:  # --check fails with it instead
        found.insert(0, f"warning: {vetting.no_model}")
    if plan.spec.script and not check_first:  # --check reads the whole script
        from slurmgen.site.user_script import layout_limits

        found += [f"warning: {line}" for line in layout_limits(plan.spec.script, node_gpus(plan))]
    return found


def node_gpus(plan) -> tuple[int, ...]:
    """The job's GPUs per node, in node-rank order (1,1,2,2)."""
    return tuple(len(ranks) for _, ranks in plan.node_ranks())
