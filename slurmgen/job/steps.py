"""The job's steps as processes: each launch function of the batch script (component_N, preflight_step)
runs in a bash of its own from launch.sh in the job's folder, where it execs its srun; a run's
component steps are reaped and stopped here."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Callable


class Steps:
    def __init__(self, launch: Path):
        self.launch = launch

    def start(self, function: str, *args: str, stdout=None) -> subprocess.Popen:
        """FUNCTION ARGS in a new bash that has read launch.sh (the functions and the arrays they use)."""
        return subprocess.Popen(["bash", "-c", 'source "$0" && "$@"', str(self.launch), function, *args],
                                stdout=stdout)


def reap(steps: list) -> tuple[int, list[tuple[str, str, int]]]:
    """steps: (name, nodes, process), the process None once reaped. The number still running, and the
    steps that ended now with a failure: (name, nodes, exit status as the shell says it)."""
    running, failed = 0, []
    for i, (name, nodes, proc) in enumerate(steps):
        if proc is None:
            continue
        rc = proc.poll()
        if rc is None:
            running += 1
            continue
        steps[i] = (name, nodes, None)
        if rc != 0:
            failed.append((name, nodes, rc if rc > 0 else 128 - rc))  # killed by a signal: 128 + its number
    return running, failed


def stop(procs: list, slurm_api, job: str, wait: float, clock: Callable[[], float], sleep: Callable[[float], None]) -> None:
    """TERM to the steps' tasks (through Slurm, else to each srun), KILL to those left after WAIT
    seconds (their steps through Slurm, and each srun)."""
    answered = slurm_api.signal_steps(job)
    if not answered:
        for proc in procs:
            proc.terminate()
    deadline = clock() + wait
    while any(p.poll() is None for p in procs) and clock() < deadline:
        sleep(0.5)
    if any(p.poll() is None for p in procs):
        if answered:  # where no controller answers, squeue would only wait for it
            slurm_api.kill_steps(job)
        for proc in procs:
            proc.kill()
