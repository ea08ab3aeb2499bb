"""The job runtime's command (`python -m slurmgen.job`, from runtime.sh): the batch script's runtime
spec (slurmgen.runtime_spec) as a JobSpec, with the real Slurm, processes and hang watch wired in."""

from __future__ import annotations

import os
import signal
import sys
from functools import partial

from slurmgen.job import hangs, slurm, stragglers
from slurmgen.job.record import JobFiles
from slurmgen.job.replace import SpareRuntime
from slurmgen.job.runtime import Runtime
from slurmgen.job.spares import Placement
from slurmgen.job.states import JobSpec
from slurmgen.job.steps import Steps
from slurmgen.runtime_spec import SPEC_ENV, FormatError, RuntimeSpec, older_script_line


def parse(env) -> JobSpec:
    """The job as the batch script describes it: its runtime spec (SLURMGEN_RUNTIME_SPEC, whose format
    is checked here too) and Slurm's job id."""
    spec = RuntimeSpec.from_json(env.get(SPEC_ENV, "")) if env.get(SPEC_ENV) else None
    if spec is None:
        raise FormatError(older_script_line())
    job = env["SLURM_JOB_ID"]
    return JobSpec(job, JobFiles.of(spec.logs, job), spec.world_size, spec.components, spec.max_restarts,
                   spec.max_failures, spec.hang_timeout, spec.stop_wait, spec.stop_grace, spec.preflight,
                   poll=float(env.get("SLURMGEN_POLL_SECONDS", "1")), settle=float(env.get("SLURMGEN_SETTLE_SECONDS", "10")),
                   spares=spec.spare_nodes, net_check=spec.net_check, stragglers=spec.stragglers)


def job_nodes() -> list[str]:
    """Every node of this run, from the allocation's own variables."""
    lists = [v for k, v in os.environ.items() if k == "SLURM_JOB_NODELIST" or k.startswith("SLURM_JOB_NODELIST_HET_GROUP_")]
    return sorted({n for v in lists for n in slurm.expand(v)})


def group_nodes(groups: int) -> list[list[str]]:
    """Each het group's nodes, in the allocation's order (Slurm's node order, as steps number them)."""
    return [slurm.expand(os.environ.get(f"SLURM_JOB_NODELIST_HET_GROUP_{i}", "")) for i in range(groups)]


def stragglers_of(spec: JobSpec):
    return partial(stragglers.look, spec.stragglers.ratio) if spec.stragglers else None


def main(argv: list[str] = ()) -> int:
    # The batch script turns the warning (USR2, or TERM) into the stop file; here the signals only
    # must not end the runtime (a requeue TERMs every process of the job, this one too, before the
    # exclusion that must follow it). Handled, not ignored: the steps started here get them.
    for signum in (signal.SIGUSR2, signal.SIGTERM):
        signal.signal(signum, lambda *_: None)
    try:
        spec = parse(os.environ)
    except FormatError as err:
        print(err, file=sys.stderr)
        return 1
    spec.files.folder.mkdir(parents=True, exist_ok=True)
    het = len(spec.components) > 1
    groups = [(str(i) if het else "-", c.nodes) for i, c in enumerate(spec.components)]
    report = spec.files.folder.parent / f"hang-report-{spec.job}.txt"
    if not spec.spares:
        watch = partial(hangs.check, spec.files.beats, spec.hang_timeout, spec.world_size, report, groups, spec.job)
        return Runtime(spec, Steps(spec.files.launch), hang_check=watch, nodes=job_nodes(),
                       straggler_check=stragglers_of(spec)).main()
    placement = Placement(spec.layout, group_nodes(len(spec.components) + 1))
    watch = lambda beats: hangs.check(spec.files.beats, spec.hang_timeout, spec.world_size, report,  # noqa: E731
                                      placement.dump_groups(), spec.job, beats=beats)
    return SpareRuntime(spec, Steps(spec.files.launch), placement, hang_check=watch, nodes=job_nodes(),
                        straggler_check=stragglers_of(spec)).main()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
