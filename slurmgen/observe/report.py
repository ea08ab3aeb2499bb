"""Compare finished or running training runs: a terminal table and a self-contained HTML report.

Reads what the training entry points write into each run's --output_dir (train/outputs.py):
progress.jsonl (one JSON line per logged step) and metrics.json (at the end), plus sweep.json
(KEY: VALUE of the swept settings) where a sweep wrote one. Standard library only; matplotlib
is imported inside write_report, so listing runs works on a bare login node (and never torch).
"""

from __future__ import annotations

import base64
import html
import json
import math
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Optional

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


# ---- finding and reading runs ------------------------------------------------------------------

def find_runs(paths: list[str]) -> list[Run]:
    """Runs under each path (a run dir, or a parent of runs up to two levels down), in order."""
    if not paths:
        raise ReportError("report: no run directories given")
    runs: list[Run] = []
    seen: set[Path] = set()
    for given in paths:
        for run_dir, name in _run_dirs(given):
            if run_dir.resolve() not in seen:
                seen.add(run_dir.resolve())
                runs.append(read_run(run_dir, name))
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
    _fill_series(run, progress)
    _fill_summary(run, progress, metrics)
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


COLUMNS = ("rank", "run", "swept", "steps", "final loss", "eval loss", "samples/s", "tokens/s", "state",
           "loss curve")
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
    return [str(position), _printable(run.name), _printable(swept_text(run)), steps_text(run),
            fmt(run.final_loss, 4), fmt(run.eval_loss, 4), fmt(run.samples_per_second, 1),
            fmt(run.tokens_per_second, 1), run.state, sparkline(run.losses)]


def terminal_table(runs: list[Run]) -> str:
    """The ranked runs as aligned plain text, preceded by the ranking key."""
    ranked, key = rank(runs)
    rows = [list(COLUMNS)] + [_row(i, r) for i, r in enumerate(ranked, 1)]
    widths = [max(len(row[c]) for row in rows) for c in range(len(COLUMNS))]
    numeric = {0, 3, 4, 5, 6, 7}
    lines = ["  ".join(cell.rjust(w) if c in numeric else cell.ljust(w)
                       for c, (cell, w) in enumerate(zip(row, widths))).rstrip() for row in rows]
    return "\n".join([f"ranked by {KEY_LABELS[key]} (lower is better)"] + lines)


def _printable(text: str) -> str:
    # A newline or escape sequence in a directory name must not break the table or the terminal.
    return "".join(c if c.isprintable() else "?" for c in text)


def swept_text(run: Run) -> str:
    return " ".join(f"{k}={v}" for k, v in run.swept.items()) or "-"


def steps_text(run: Run) -> str:
    if run.last_step is None:
        return "-"
    return f"{run.last_step}/{run.max_steps}" if run.max_steps else str(run.last_step)


def fmt(value: Optional[float], digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


# ---- plots and HTML -----------------------------------------------------------------------------

def write_report(runs: list[Run], out_dir) -> list[Path]:
    """Write loss.png, throughput.png and a self-contained report.html into out_dir."""
    if not runs:
        raise ReportError("report: no runs to report")
    try:
        from matplotlib.figure import Figure  # no pyplot: no global backend or figure state
    except ImportError:
        raise ReportError("report: plots need matplotlib: pip install 'slurmgen[report]'") from None
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    ranked, key = rank(runs)
    loss_png, tput_png, page = out / "loss.png", out / "throughput.png", out / "report.html"
    _save(_loss_figure(Figure, ranked), loss_png)
    _save(_throughput_figure(Figure, ranked), tput_png)
    page.write_text(_html(ranked, key, loss_png.read_bytes(), tput_png.read_bytes()), encoding="utf-8")
    return [loss_png, tput_png, page]


def _save(fig, path: Path) -> None:
    # No Software tag: the PNG (and so the page) carries no URL and is reproducible.
    fig.savefig(path, format="png", dpi=100, metadata={"Software": None})


def _label(name: str) -> str:
    # matplotlib reads $...$ as math and hides legend labels that start with "_".
    name = _printable(name).replace("$", r"\$")
    return " " + name if name.startswith("_") else name


def _loss_figure(Figure, runs: list[Run]):
    fig = Figure(figsize=(9, 5), layout="constrained")
    ax = fig.add_subplot()
    colors = [f"C{i % 10}" for i in range(len(runs))]
    for run, color in zip(runs, colors):
        if run.steps:
            ax.plot(run.steps, run.losses, color=color, label=_label(run.name))
        if run.eval_steps:
            ax.plot(run.eval_steps, run.eval_losses, color=color, linestyle="--", marker="o",
                    label=_label(f"{run.name} (eval)"))
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize="small", ncol=1 + len(runs) // 12)
    else:
        ax.text(0.5, 0.5, "no loss logged yet", ha="center", va="center", transform=ax.transAxes)
    ax.set(title="Loss against step", xlabel="step", ylabel="loss")
    ax.grid(alpha=0.3)
    return fig


def _throughput_figure(Figure, runs: list[Run]):
    metrics = [("samples_per_second", "samples/s")]
    if any(r.tokens_per_second is not None for r in runs):
        metrics.append(("tokens_per_second", "tokens/s"))
    fig = Figure(figsize=(5 * len(metrics) + 3, 1.5 + 0.4 * len(runs)), layout="constrained")
    names = [_label(r.name) for r in runs]
    for i, (attr, unit) in enumerate(metrics):
        ax = fig.add_subplot(1, len(metrics), i + 1)
        values = [getattr(r, attr) for r in runs]
        # Positions, not names: two sweeps may each have a run called seed1.
        bars = ax.barh(range(len(runs)), [v or 0.0 for v in values], color=f"C{i}")
        ax.set_yticks(range(len(runs)), names)
        ax.bar_label(bars, labels=["n/a" if v is None else f"{v:,.1f}" for v in values], padding=3,
                     fontsize="small")
        ax.invert_yaxis()  # best run on top, as in the table
        ax.set(title=unit, xlabel=unit)
        ax.margins(x=0.2)
        if i:
            ax.tick_params(labelleft=False)
    return fig


CSS = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; margin: 1em 0; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.7em; }
th { background: #f2f2f2; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
img { max-width: 100%; display: block; margin: 1em 0; }
.note { color: #555; }
"""


def _html(ranked: list[Run], key: str, loss_png: bytes, tput_png: bytes) -> str:
    e = html.escape
    swept_keys = list(dict.fromkeys(k for r in ranked for k in r.swept))
    head = ["rank", "run"] + swept_keys + ["steps", "final loss", "eval loss", "samples/s",
                                           "tokens/s", "state"]
    rows = []
    for i, run in enumerate(ranked, 1):
        cells = [_td(str(i), True), f'<td title="{e(str(run.path))}">{e(run.name)}</td>']
        cells += [_td(run.swept.get(k, ""), False) for k in swept_keys]
        cells += [_td(steps_text(run), True), _td(fmt(run.final_loss, 4), True),
                  _td(fmt(run.eval_loss, 4), True), _td(fmt(run.samples_per_second, 1), True),
                  _td(fmt(run.tokens_per_second, 1), True), _td(run.state, False)]
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return "\n".join([
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        "<title>slurmgen report</title>", f"<style>{CSS}</style></head><body>",
        f"<h1>slurmgen report: {len(ranked)} run(s)</h1>",
        f'<p class="note">Ranked by {e(KEY_LABELS[key])} (lower is better).</p>',
        "<table><thead><tr>" + "".join(f"<th>{e(h)}</th>" for h in head) + "</tr></thead>",
        "<tbody>", *rows, "</tbody></table>",
        "<h2>Loss</h2>", _img(loss_png, "loss against step for every run"),
        "<h2>Throughput</h2>", _img(tput_png, "samples and tokens per second per run"),
        "</body></html>", ""])


def _td(text: str, numeric: bool) -> str:
    return f'<td class="num">{html.escape(text)}</td>' if numeric else f"<td>{html.escape(text)}</td>"


def _img(png: bytes, alt: str) -> str:
    return f'<img alt="{alt}" src="data:image/png;base64,{base64.b64encode(png).decode("ascii")}">'
