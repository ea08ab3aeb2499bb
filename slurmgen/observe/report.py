"""Compare finished or running training runs: a terminal table and a self-contained HTML report.

Reads what the training entry points write into each run's --output_dir (train/outputs.py):
progress.jsonl (one JSON line per logged step) and metrics.json (at the end), plus sweep.json
(KEY: VALUE of the swept settings) where a sweep wrote one; with --logs, the job logs too
(report_logs), for each run's context (report_context). Standard library only; matplotlib
is imported inside write_report, so listing runs works on a bare login node (and never torch).
"""

from __future__ import annotations

import json
import math
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Optional

from slurmgen.observe import report_context, report_logs

PROGRESS = "progress.jsonl"
METRICS = "metrics.json"
SWEEP = "sweep.json"
KEY_LABELS = {"eval_loss": "eval loss", "final_loss": "final train loss"}


class ReportError(Exception):
    """A user-facing one-line refusal (bad path, matplotlib missing)."""


@dataclass
class Run:
    name: str
    path: Path
    swept: dict[str, str] = field(default_factory=dict)
    steps: list[int] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)
    eval_steps: list[int] = field(default_factory=list)
    eval_losses: list[float] = field(default_factory=list)
    last_step: Optional[int] = None
    max_steps: Optional[int] = None
    samples_per_second: Optional[float] = None
    tokens_per_second: Optional[float] = None
    final_loss: Optional[float] = None
    eval_loss: Optional[float] = None
    state: str = "running/incomplete"
    entries: list[dict] = field(default_factory=list, repr=False)  # progress.jsonl's lines
    metrics: Optional[dict] = field(default=None, repr=False)
    context: report_context.Context = field(default_factory=report_context.Context)


# ---- finding and reading runs ------------------------------------------------------------------

def find_runs(paths: list[str], logs: Optional[list[str]] = None) -> list[Run]:
    """Runs under each path (a run dir, or a parent of runs up to two levels down), in order, each
    with its context; logs: job log files or directories of them (report_logs.match)."""
    if not paths:
        raise ReportError("report: no run directories given")
    runs: list[Run] = []
    seen: set[Path] = set()
    for given in paths:
        for run_dir, name in _run_dirs(given):
            if run_dir.resolve() not in seen:
                seen.add(run_dir.resolve())
                runs.append(read_run(run_dir, name))
    try:
        files = report_logs.log_files(list(logs or []))
    except report_logs.LogError as err:
        raise ReportError(str(err)) from None
    job_logs = [log for log in map(report_logs.read_log, files) if log is not None]
    for run, starts in zip(runs, report_logs.match([r.path for r in runs], job_logs)):
        run.context = report_context.build(run.path, run.entries, run.metrics, run.swept, run.steps,
                                           run.losses, starts)
    return runs


def _run_dirs(given: str) -> list[tuple[Path, str]]:
    root = Path(given)
    if not root.is_dir():
        what = "no such directory" if not root.exists() else "not a directory"
        raise ReportError(f"report: {given}: {what}; expected a run directory "
                          f"(with {PROGRESS} or {METRICS}) or a directory of runs")
    if _is_run(root):
        return [(root, root.resolve().name)]
    found = []
    for child in _subdirs(root, given):
        if _is_run(child):
            found.append((child, child.name))
        else:
            found += [(g, f"{child.name}/{g.name}") for g in _subdirs(child, given) if _is_run(g)]
    if not found:
        raise ReportError(f"report: {given}: no {PROGRESS} or {METRICS} here or in its subdirectories")
    return sorted(found, key=lambda dn: _natural(dn[1]))


def _is_run(d: Path) -> bool:
    return (d / PROGRESS).is_file() or (d / METRICS).is_file()


def _subdirs(d: Path, given: str) -> list[Path]:
    try:
        # Hidden directories (.git, .ipynb_checkpoints) never hold runs.
        return [c for c in d.iterdir() if c.is_dir() and not c.name.startswith(".")]
    except OSError as err:
        raise ReportError(f"report: {given}: cannot read {d}: {err.strerror}") from None


def _natural(name: str) -> list:
    # seed2 before seed10.
    return [(0, int(t), "") if t.isdigit() else (1, 0, t) for t in re.split(r"(\d+)", name) if t]


def read_run(run_dir: Path, name: Optional[str] = None) -> Run:
    run = Run(name=name or run_dir.resolve().name, path=run_dir, swept=_read_sweep(run_dir))
    progress = _read_progress(run_dir / PROGRESS)
    metrics = _read_json_object(run_dir / METRICS)
    run.entries, run.metrics = progress, metrics
    _fill_series(run, progress)
    _fill_summary(run, progress, metrics)
    run.context = report_context.build(run_dir, progress, metrics, run.swept, run.steps, run.losses, [])
    return run


def _read_sweep(run_dir: Path) -> dict[str, str]:
    data = _read_json_object(run_dir / SWEEP) or {}
    return {str(k): v if isinstance(v, str) else json.dumps(v) for k, v in data.items()}


def _read_json_object(path: Path) -> Optional[dict]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _read_progress(path: Path) -> list[dict]:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return []
    entries = []
    for line in text.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue  # a torn or hand-edited line must not hide the rest of the run
        if isinstance(entry, dict) and _int(entry.get("step")) is not None:
            entries.append(entry)
    return entries


def _num(value: Any) -> Optional[float]:
    # JSON true/false are ints to Python; they are no measurement.
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _int(value: Any) -> Optional[int]:
    return int(value) if _num(value) is not None and float(value).is_integer() else None


def _fill_series(run: Run, progress: list[dict]) -> None:
    train = [(_int(e["step"]), _num(e.get("loss"))) for e in progress]
    evals = [(_int(e["step"]), _num(e.get("eval_loss"))) for e in progress]
    run.steps, run.losses = _latest_attempt([p for p in train if p[1] is not None])
    run.eval_steps, run.eval_losses = _latest_attempt([p for p in evals if p[1] is not None])


def _latest_attempt(points: list[tuple[int, float]]) -> tuple[list[int], list[float]]:
    # A requeued run logs again the steps after its last checkpoint: keep the newest ones.
    kept: list[tuple[int, float]] = []
    for step, value in points:
        while kept and kept[-1][0] >= step:
            kept.pop()
        kept.append((step, value))
    return [s for s, _ in kept], [v for _, v in kept]


def _fill_summary(run: Run, progress: list[dict], metrics: Optional[dict]) -> None:
    m = metrics or {}
    last = progress[-1] if progress else {}
    run.last_step = _first(_int(m.get("global_step")), _int(last.get("step")))
    run.max_steps = _int(last.get("max_steps"))
    run.samples_per_second = _first(_num(m.get("samples_per_second")), _mean(progress, "samples_per_second"))
    run.tokens_per_second = _first(_num(m.get("tokens_per_second")), _mean(progress, "tokens_per_second"))
    # metrics.json's train_loss is the mean over the run; last_loss is the loss at its end.
    run.final_loss = _first(_num(m.get("last_loss")), _num(m.get("train_loss")),
                            run.losses[-1] if run.losses else None)
    run.eval_loss = _first(_num(m.get("eval_loss")), run.eval_losses[-1] if run.eval_losses else None)
    if metrics is not None:
        run.state = "stopped" if metrics.get("stopped_early") is True else "finished"


def _first(*values):
    return next((v for v in values if v is not None), None)


def _mean(entries: Iterable[dict], key: str) -> Optional[float]:
    values = [v for v in (_num(e.get(key)) for e in entries) if v is not None]
    return sum(values) / len(values) if values else None


# ---- ranking and the terminal table -------------------------------------------------------------

def rank(runs: list[Run]) -> tuple[list[Run], str]:
    """Best first, by eval loss if every run has one, else by final train loss; no loss last.

    Returns (ranked runs, key): key is the Run attribute used, "eval_loss" or "final_loss".
    """
    key = "eval_loss" if runs and all(_finite(r.eval_loss) for r in runs) else "final_loss"
    # A diverged (nan/inf) loss ranks with the runs that have none; sorted() keeps ties in order.
    ranked = sorted(runs, key=lambda r: (0, getattr(r, key)) if _finite(getattr(r, key)) else (1, 0.0))
    return ranked, key


def _finite(value: Optional[float]) -> bool:
    return value is not None and math.isfinite(value)


COLUMNS = ("rank", "run", "swept", "steps", "final loss", "eval loss", "samples/s", "tokens/s", "goodput",
           "restarts", "state", "loss curve")
BARS = "▁▂▃▄▅▆▇█"  # lowest to highest


def sparkline(values: list[float], width: int = 24) -> str:
    """The loss over the run in one word: each character the mean of its share of the steps, its
    height between the run's lowest and highest loss (NaN and inf left out)."""
    values = [v for v in values if math.isfinite(v)]
    if not values:
        return "-"
    width = min(width, len(values))
    means = [statistics.fmean(values[i * len(values) // width:(i + 1) * len(values) // width])
             for i in range(width)]
    low, high = min(means), max(means)
    return "".join(BARS[round((m - low) / (high - low) * (len(BARS) - 1)) if high > low else 0] for m in means)


def _row(position: int, run: Run) -> list[str]:
    return [str(position), printable(run.name), printable(swept_text(run)), steps_text(run),
            fmt(run.final_loss, 4), fmt(run.eval_loss, 4), fmt(run.samples_per_second, 1),
            fmt(run.tokens_per_second, 1), goodput_text(run), str(len(run.context.restarts)
                                                                    or len(run.context.interruptions)),
            run.state, sparkline(run.losses)]


def terminal_table(runs: list[Run]) -> str:
    """The ranked runs as aligned plain text, preceded by the ranking key."""
    ranked, key = rank(runs)
    rows = [list(COLUMNS)] + [_row(i, r) for i, r in enumerate(ranked, 1)]
    widths = [max(len(row[c]) for row in rows) for c in range(len(COLUMNS))]
    numeric = {0, 3, 4, 5, 6, 7, 8, 9}
    lines = ["  ".join(cell.rjust(w) if c in numeric else cell.ljust(w)
                       for c, (cell, w) in enumerate(zip(row, widths))).rstrip() for row in rows]
    return "\n".join([f"ranked by {KEY_LABELS[key]} (lower is better)"] + lines)


def printable(text: str) -> str:
    # A newline or escape sequence in a directory name must not break the table or the terminal.
    return "".join(c if c.isprintable() else "?" for c in text)


def swept_text(run: Run) -> str:
    return " ".join(f"{k}={v}" for k, v in run.swept.items()) or "-"


def goodput_text(run: Run) -> str:
    value = run.context.goodput
    return "-" if value is None else f"{100 * value:.0f}%"


def steps_text(run: Run) -> str:
    if run.last_step is None:
        return "-"
    return f"{run.last_step}/{run.max_steps}" if run.max_steps else str(run.last_step)


def fmt(value: Optional[float], digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"





