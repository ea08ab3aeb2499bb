"""The job runtime's command line (`python -m slurmgen.job --job ...`, from runtime.sh): the
batch script's settings as a JobSpec, with the real Slurm, processes and hang watch wired in."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from functools import partial

from slurmgen.job import hangs, slurm, stragglers
from slurmgen.job.record import JobFiles
from slurmgen.job.replace import SpareRuntime
from slurmgen.job.runtime import Runtime
from slurmgen.job.spares import Placement
from slurmgen.job.states import Component, JobSpec, StragglerRule
from slurmgen.job.steps import Steps


def parse(argv: list[str]) -> JobSpec:
    p = argparse.ArgumentParser(prog="python -m slurmgen.job")
    p.add_argument("--job", required=True)
    p.add_argument("--logs", required=True)
    p.add_argument("--world-size", type=int, required=True)
    p.add_argument("--max-restarts", type=int, default=3)
    p.add_argument("--max-failures", type=int, default=2)
    p.add_argument("--hang-timeout", type=float, default=0)
    p.add_argument("--stop-wait", type=float, default=170)
    p.add_argument("--stop-grace", type=float, default=0)
    p.add_argument("--preflight", action="store_true")
    p.add_argument("--spares", type=int, default=0)
    p.add_argument("--net-check", nargs=2, type=float, metavar=("RATIO", "FLOOR_GBPS"))
    p.add_argument("--stragglers", nargs=3, metavar=("RATIO", "WINDOW", "ACTION"))
    p.add_argument("--component", nargs=4, action="append", required=True, metavar=("NAME", "NODES", "GPUS", "LAUNCH"))
    a = p.parse_args(argv)
    components = tuple(Component(name, int(nodes), int(gpus), launch) for name, nodes, gpus, launch in a.component)
    return JobSpec(a.job, JobFiles.of(a.logs, a.job), a.world_size, components, a.max_restarts, a.max_failures,
                   a.hang_timeout, a.stop_wait, a.stop_grace, a.preflight,
                   poll=float(os.environ.get("SLURMGEN_POLL_SECONDS", "1")),
                   settle=float(os.environ.get("SLURMGEN_SETTLE_SECONDS", "10")), spares=a.spares,
                   net_check=tuple(a.net_check) if a.net_check else None,
                   stragglers=StragglerRule(float(a.stragglers[0]), int(a.stragglers[1]), a.stragglers[2])
                   if a.stragglers else None)


def job_nodes() -> list[str]:
    """Every node of this run, from the allocation's own variables."""
    lists = [v for k, v in os.environ.items() if k == "SLURM_JOB_NODELIST" or k.startswith("SLURM_JOB_NODELIST_HET_GROUP_")]
    return sorted({n for v in lists for n in slurm.expand(v)})


def group_nodes(groups: int) -> list[list[str]]:
    """Each het group's nodes, in the allocation's order (Slurm's node order, as steps number them)."""
    return [slurm.expand(os.environ.get(f"SLURM_JOB_NODELIST_HET_GROUP_{i}", "")) for i in range(groups)]


def stragglers_of(spec: JobSpec):
    return partial(stragglers.look, spec.stragglers.ratio) if spec.stragglers else None


def main(argv: list[str]) -> int:
    # The batch script turns the warning (USR2, or TERM) into the stop file; here the signals only
    # must not end the runtime (a requeue TERMs every process of the job, this one too, before the
    # exclusion that must follow it). Handled, not ignored: the steps started here get them.
    for signum in (signal.SIGUSR2, signal.SIGTERM):
        signal.signal(signum, lambda *_: None)
    spec = parse(argv)
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
