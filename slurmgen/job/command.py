"""The job runtime's command (`python -m slurmgen.job`, from runtime.sh): the batch script's runtime
spec (slurmgen.runtime_spec; its format checked here too) and Slurm's job id as the Job, with the real
Slurm, processes, hang watch and straggler watch wired in; the job's Result as the exit status."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

from slurmgen.job import hangs, index, slurm, stragglers
from slurmgen.job.record import SETTLE_SECONDS, JobFiles
from slurmgen.job.replace import Spares
from slurmgen.job.runtime import Runtime
from slurmgen.job.spares import Placement
from slurmgen.job.states import Job, exit_status
from slurmgen.job.steps import Steps
from slurmgen.runtime_spec import SPEC_ENV, FormatError, RuntimeSpec, older_script_line


def parse(env) -> Job:
    """The job as the batch script describes it: its runtime spec (SLURMGEN_RUNTIME_SPEC) and Slurm's job id."""
    if not env.get(SPEC_ENV):
        raise FormatError(older_script_line())
    spec, job = RuntimeSpec.from_json(env[SPEC_ENV]), env["SLURM_JOB_ID"]
    return Job(spec, job, JobFiles.of(spec.logs, job), poll=float(env.get("SLURMGEN_POLL_SECONDS", "1")),
               settle=float(env.get("SLURMGEN_SETTLE_SECONDS", SETTLE_SECONDS)))


def job_nodes() -> list[str]:
    """Every node of this run, from the allocation's own variables."""
    lists = [v for k, v in os.environ.items() if k == "SLURM_JOB_NODELIST" or k.startswith("SLURM_JOB_NODELIST_HET_GROUP_")]
    return sorted({n for v in lists for n in slurm.expand(v)})


def group_nodes(groups: int) -> list[list[str]]:
    """Each het group's nodes, in the allocation's order (Slurm's node order, as steps number them)."""
    return [slurm.expand(os.environ.get(f"SLURM_JOB_NODELIST_HET_GROUP_{i}", "")) for i in range(groups)]


def runtime(job: Job) -> Runtime:
    spec, steps = job.spec, Steps(job.files.launch)
    kinds = stragglers.rank_kinds(spec.components)  # each rank judged against its own kind of GPU
    watch_stragglers = partial(stragglers.look, spec.stragglers.ratio, kinds=kinds) if spec.stragglers else None
    if not spec.spare_nodes:
        het = len(spec.components) > 1
        groups = [(str(i) if het else "-", c.nodes) for i, c in enumerate(spec.components)]
        watch = partial(hangs.check, job.files.beats, spec.hang_timeout, spec.world_size, job.files.hang_report, groups,
                        job.id)
        return Runtime(job, steps, hang_check=watch, nodes=job_nodes(), straggler_check=watch_stragglers)
    placement = Placement(spec.layout, group_nodes(len(spec.components) + 1))
    watch = lambda beats: hangs.check(job.files.beats, spec.hang_timeout, spec.world_size,  # noqa: E731
                                      job.files.hang_report, placement.dump_groups(), job.id, beats=beats)
    spares = Spares(placement, steps, time.monotonic, time.sleep, os.environ.get("SLURMD_NODENAME", ""))
    return Runtime(job, steps, hang_check=watch, nodes=job_nodes(), straggler_check=watch_stragglers, spares=spares)


def main(argv: list[str] = ()) -> int:
    # The batch script turns the warning (USR2, or TERM) into the stop file; here the signals only
    # must not end the runtime (a requeue TERMs every process of the job, this one too, before the
    # exclusion that must follow it). Handled, not ignored: the steps started here get them.
    for signum in (signal.SIGUSR2, signal.SIGTERM):
        signal.signal(signum, lambda *_: None)
    try:
        job = parse(os.environ)
    except FormatError as err:
        print(err, file=sys.stderr)
        return 1
    job.files.folder.mkdir(parents=True, exist_ok=True)
    try:
        from slurmgen.site.jobs import job_records

        index.write(index_entry(job, os.environ, (job_records(job.id) or [{}])[0]))
    except (OSError, subprocess.SubprocessError):  # a job never fails for its index entry
        pass
    return exit_status(runtime(job).main())


def index_entry(job: Job, env, record: dict) -> index.Entry:
    """This job in the user's index (slurmgen status, logs, list): its folder, and its logs as Slurm names
    them (record: scontrol's); the first start's time kept across requeues."""
    from slurmgen.site.jobs import NO_VALUE

    logs = [str(Path(p).absolute()) for p in dict.fromkeys([record.get("StdOut", ""), record.get("StdErr", "")])
            if p not in NO_VALUE]
    cluster, folder = index.cluster_name(), str(job.files.folder.absolute())
    earlier = index.read(cluster, job.id)
    started = earlier.started if earlier and earlier.folder == folder else time.time()
    return index.Entry(cluster, job.id, index.RENDERED, folder, logs, name=env.get("SLURM_JOB_NAME", ""),
                       command=record.get("Command", ""), world_size=job.spec.world_size, started=started)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
