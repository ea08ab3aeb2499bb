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


# `python -m train.X` would put the working folder first on sys.path, where a user's own train.py
# (the seed's file name) is imported, and so run, in place of this package's train/: the tool runs
# with the working folder off the path instead (PYTHONSAFEPATH is 3.11's; this works on 3.9 too).
_RUN = "import runpy, sys; del sys.path[0]; runpy.run_module(sys.argv.pop(1), run_name='__main__', alter_sys=True)"


def run_tool(module: str, args: list[str]) -> ToolRun:
    run = subprocess.run([sys.executable, "-c", _RUN, module, *args], capture_output=True, text=True)
    errors = [line for line in run.stderr.splitlines() if line.strip()]
    why = errors[-1] if errors else f"exit status {run.returncode}"
    missing = "No module named" in why
    if missing:
        why = f"{why.split(': ', 1)[-1]}: pip install 'slurmgen[train]'"
    return ToolRun(run.returncode, run.stdout, why, missing)
