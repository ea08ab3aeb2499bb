"""Which Slurm release the scripts are for: the installed one (`sbatch --version`), if any."""

from __future__ import annotations

import functools
import re
import subprocess
from typing import Optional

Release = tuple[int, int]


def parse(text: str) -> Optional[Release]:
    """'slurm-wlm 22.05.8' or 'slurm 25.11.7' -> (22, 5); None if no version is in it."""
    match = re.search(r"(\d+)\.(\d+)", text)
    return (int(match.group(1)), int(match.group(2))) if match else None


@functools.lru_cache(maxsize=1)
def installed() -> Optional[Release]:
    """The release of the sbatch on PATH; None where there is none (a laptop, a CI box)."""
    try:
        done = subprocess.run(["sbatch", "--version"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return parse(done.stdout) if done.returncode == 0 else None


def name(release: Optional[Release]) -> str:
    return f"{release[0]}.{release[1]:02d}" if release else "any release"
