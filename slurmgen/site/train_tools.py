"""Run one of train/'s tools (train.sizing, train.script_check) in this Python, as a program: they
need torch, transformers and TRL, which slurmgen itself never imports."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class ToolRun:
    returncode: int
    stdout: str
    why: str  # the last line of stderr: why it failed, when it did
    missing: bool  # it failed for a module this Python lacks (why then names the [train] extra)


def run_tool(module: str, args: list[str]) -> ToolRun:
    run = subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True)
    errors = [line for line in run.stderr.splitlines() if line.strip()]
    why = errors[-1] if errors else f"exit status {run.returncode}"
    missing = "No module named" in why
    if missing:
        why = f"{why.split(': ', 1)[-1]}: pip install 'slurmgen[train]'"
    return ToolRun(run.returncode, run.stdout, why, missing)
