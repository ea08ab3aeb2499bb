"""The job's steps as processes: each launch function of the batch script (component_N, preflight_step)
runs in a bash of its own from launch.sh in the job's folder, where it execs its srun."""

from __future__ import annotations

import subprocess
from pathlib import Path


class Steps:
    def __init__(self, launch: Path):
        self.launch = launch

    def start(self, function: str, *args: str, stdout=None) -> subprocess.Popen:
        """FUNCTION ARGS in a new bash that has read launch.sh (the functions and the arrays they use)."""
        return subprocess.Popen(["bash", "-c", 'source "$0" && "$@"', str(self.launch), function, *args],
                                stdout=stdout)
