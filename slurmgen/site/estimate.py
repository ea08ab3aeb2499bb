"""When would a script start? Slurm's own answer: `sbatch --test-only` (nothing is submitted).

The scheduler places the job as it would now, behind the running and pending ones, and prints
"Job N to start at TIME using P processors on [nodes] NODES [in partition P]" (one line for a
heterogeneous job too; 25.11 words it slightly differently). A running job without a time limit ends, for the scheduler, a year from
now; an estimate that far out means "when those jobs end", which nobody can say.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Optional

# 25.11 adds " on cluster NAME" where the cluster has one, and a stray " a" before "using".
_LINE = re.compile(r"Job \d+ to start at (\S+).*? using \d+ processors on (?:nodes )?(\S+)")
NOW = timedelta(seconds=60)  # "at once", allowing for the scheduler's own cycle
UNBOUNDED = timedelta(days=300)  # behind a job without a time limit


@dataclass(frozen=True)
class Estimate:
    start: Optional[datetime] = None
    nodes: str = ""
    error: str = ""  # why there is none: sbatch's own message

    def describe(self, now: datetime) -> str:
        if self.start is None:
            return f"no estimate: {self.error}"
        wait = self.start - now
        if wait <= NOW:
            return f"starts now on {self.nodes}"
        if wait >= UNBOUNDED:
            return (f"waits for running jobs that have no time limit, so Slurm cannot say when"
                    f" (then on {self.nodes})")
        return f"starts at {self.start:%Y-%m-%d %H:%M} (in {_duration(wait)}) on {self.nodes}"


def _duration(delta: timedelta) -> str:
    minutes = int(delta.total_seconds() // 60)
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min" if hours < 48 else f"{hours // 24} days"


def parse(output: str) -> Estimate:
    """sbatch --test-only's stderr -> Estimate (its first error line when there is no estimate)."""
    found = _LINE.search(output)
    if found:
        try:
            return Estimate(datetime.fromisoformat(found.group(1)), found.group(2))
        except ValueError:
            pass
    lines = [line.removeprefix("sbatch: ").strip() for line in output.splitlines() if line.strip()]
    return Estimate(error=next((line for line in lines if "error" in line.lower()), lines[0] if lines else
                               "sbatch --test-only said nothing"))


def ask(script: str) -> Estimate:
    """Slurm's estimate for this script's text (read from stdin, as sbatch allows)."""
    try:
        proc = subprocess.run(["sbatch", "--test-only"], input=script, capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        return Estimate(error="sbatch not found")
    except subprocess.TimeoutExpired:
        return Estimate(error="sbatch --test-only did not answer within 60 s")
    return parse(proc.stderr + proc.stdout)
