"""The lines of a user's --script that would fail on every rank after the queue wait.

The reading is train.script_check's (it asks the installed TRL and transformers which arguments
they take), run in a Python that has them; slurmgen itself never imports torch. The script is
parsed, never imported or run.
"""

from __future__ import annotations

from dataclasses import dataclass

from slurmgen.site.train_tools import run_tool


@dataclass(frozen=True)
class Reading:
    findings: tuple[str, ...] = ()  # "SCRIPT:LINE: what: fix"
    note: str = ""  # why the script was not read, when it was not
    advice: tuple[str, ...] = ()  # "SCRIPT:LINE: note: ...": loses work (a run that never resumes), fails nothing


def read(script: str, cpu_only: bool = False, resume_auto: bool = False, gpus: tuple[int, ...] = (),
         layout_only: bool = False) -> Reading:
    """gpus: the job's GPUs per node (a Lightning Trainer on uneven nodes needs train.lightning's
    strategy); layout_only: only what the layout decides (no TRL or transformers asked)."""
    flags = [*(["--cpu-only"] if cpu_only else []), *(["--resume-auto"] if resume_auto else []),
             *(["--gpus", ",".join(map(str, gpus))] if gpus else []), *(["--layout-only"] if layout_only else [])]
    run = run_tool("train.script_check", [script, *flags])
    lines = tuple(line for line in run.stdout.splitlines() if line.strip())
    if run.missing:  # an ImportError's traceback exits 1 too
        return Reading(note=f"{script} not read: reading it needs slurmgen's [train] extra: {run.why}")
    if run.returncode in (0, 1):
        advice = tuple(line for line in lines if line.split(": ", 1)[-1].startswith("note: "))
        return Reading(findings=tuple(line for line in lines if line not in advice), advice=advice)
    return Reading(note=f"{script} not read: {lines[0] if lines else run.why}")


def _script_check():
    """train/script_check.py, loaded by its path (a user's train.py in the working directory would
    shadow `import train`); its resume check is the standard library's ast alone."""
    import importlib.util
    import os

    from slurmgen.site.train_tools import ROOT

    found = importlib.util.spec_from_file_location("slurmgen._train_script_check",
                                                   os.path.join(ROOT, "train", "script_check.py"))
    module = importlib.util.module_from_spec(found)
    found.loader.exec_module(module)
    return module


def never_resumes(script: str) -> list[str]:
    """`SCRIPT:LINE: ...` for each trainer.train() that passes no resume_from_checkpoint: requeued, the
    run would start again from step 0. Raises SpecError for a script that is not Python at all."""
    import ast

    from slurmgen.plan.words import SpecError

    try:
        with open(script, encoding="utf-8") as handle:
            tree = ast.parse(handle.read(), filename=script)
    except SyntaxError as err:
        raise SpecError(f"--script {script!r}: not Python that runs (line {err.lineno}: {err.msg})") from None
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise SpecError(f"--script {script!r}: cannot be read as Python text ({err})") from None
    check = _script_check()
    return [f"{script}:{line}: {text[len(check.NOTE):]}" for line, text in check.resume_findings(tree)]


def layout_limits(script: str, gpus: tuple[int, ...]) -> list[str]:
    """`SCRIPT:LINE: ...` for what the layout makes fail on every rank: a Lightning Trainer without
    train.lightning's strategy on nodes of different widths (ast alone: no subprocess, nothing run)."""
    import ast

    if len(set(gpus)) < 2:
        return []
    try:
        with open(script, encoding="utf-8") as handle:
            tree = ast.parse(handle.read(), filename=script)
    except (OSError, UnicodeDecodeError, ValueError, SyntaxError):
        return []  # never_resumes refuses what is not Python
    check = _script_check()
    return [f"{script}:{line}: {text}" for line, text in check.lightning_findings(tree, check.lightning_trainers(tree), gpus)]
