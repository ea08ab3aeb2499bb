"""Which Slurm release the scripts are for: the installed one (`sbatch --version`), if any, asked here
at the edge (the commands) and handed to the plan, which asks nothing itself."""

from __future__ import annotations

import functools
import subprocess
from typing import Optional

from slurmgen.plan.sbatch_options import parse_release as parse, release_name as name  # noqa: F401

Release = tuple[int, int]


@functools.lru_cache(maxsize=1)
def installed() -> Optional[Release]:
    """The release of the sbatch on PATH; None where there is none (a laptop, a CI box)."""
    try:
        done = subprocess.run(["sbatch", "--version"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return parse(done.stdout) if done.returncode == 0 else None
