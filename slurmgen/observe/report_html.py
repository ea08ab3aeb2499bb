"""The report's files: loss.png and throughput.png (matplotlib, imported only here) and a
self-contained report.html with the ranked table and both plots."""

from __future__ import annotations

import base64
import html
from pathlib import Path

from slurmgen.observe.report import KEY_LABELS, ReportError, Run, fmt, printable, rank, steps_text


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
    name = printable(name).replace("$", r"\$")
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
