"""The lines of a user's --script that would fail on every rank after the queue wait.

The reading is train.script_check's (it asks the installed TRL and transformers which arguments
they take), run in a Python that has them; slurmgen itself never imports torch. The script is
parsed, never imported or run.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class Reading:
    findings: tuple[str, ...] = ()  # "SCRIPT:LINE: what: fix"
    note: str = ""  # why the script was not read, when it was not
    advice: tuple[str, ...] = ()  # "SCRIPT:LINE: note: ...": loses work (a run that never resumes), fails nothing


def read(script: str, cpu_only: bool = False, resume_auto: bool = False) -> Reading:
    flags = [*(["--cpu-only"] if cpu_only else []), *(["--resume-auto"] if resume_auto else [])]
    run = subprocess.run([sys.executable, "-m", "train.script_check", script, *flags],
                         capture_output=True, text=True)
    lines = tuple(line for line in run.stdout.splitlines() if line.strip())
    if run.returncode in (0, 1):
        advice = tuple(line for line in lines if line.split(": ", 1)[-1].startswith("note: "))
        return Reading(findings=tuple(line for line in lines if line not in advice), advice=advice)
    errors = [line for line in run.stderr.splitlines() if line.strip()]
    why = lines[0] if lines else errors[-1] if errors else f"exit status {run.returncode}"
    if "No module named" in why:
        why = f"reading it needs slurmgen's [train] extra ({why.split(': ', 1)[-1]})"
    return Reading(note=f"{script} not read: {why}")
