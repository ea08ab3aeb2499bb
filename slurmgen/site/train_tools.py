"""Run one of train/'s tools (train.sizing, train.script_check) in this Python, as a program: they
need torch, transformers and TRL, which slurmgen itself never imports."""

from __future__ import annotations

import os
import sys

from slurmgen.frozen_records import frozen

# The folder that holds slurmgen/ and train/ (the repository, or site-packages): the tools are the
# train package beside this slurmgen, whatever the working directory holds. os.path, not pathlib:
# render imports this module, and nothing else on its way needs pathlib (issue 43).
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))


@frozen(eq=False)
class ToolRun:
    """How a run of a training tool ended."""

    returncode: int
    stdout: str
    why: str  # the last line of stderr: why it failed, when it did
    missing: bool  # it failed for a module this Python lacks (why then names the [train] extra)


def tool_command(module: str, args: list[str]) -> list[str]:
    """`python -m MODULE ARGS` with ROOT first on sys.path instead of the working directory: a user's
    train.py there would shadow the train package."""
    run = f"import runpy, sys; sys.path[0] = {ROOT!r}; runpy.run_module({module!r}, run_name='__main__', alter_sys=True)"
    return [sys.executable, "-c", run, *args]


def run_tool(module: str, args: list[str]) -> ToolRun:
    import subprocess  # here: a render, which never runs a tool, imports none (issue 43)

    run = subprocess.run(tool_command(module, args), capture_output=True, text=True)
    errors = [line for line in run.stderr.splitlines() if line.strip()]
    why = errors[-1] if errors else f"exit status {run.returncode}"
    missing = "No module named" in why
    if missing:
        why = f"{why.split(': ', 1)[-1]}: pip install 'slurmgen[train]'"
    return ToolRun(run.returncode, run.stdout, why, missing)
