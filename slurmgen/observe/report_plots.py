"""The report's two figures, built on the matplotlib Figure class the HTML writer passes in (this
module imports no matplotlib itself): loss against step with every interruption marked, and
throughput over the run and per run.

Each comes in two sizes: WIDE for a desktop page (shown at its 900 px) and NARROW for a phone, a
figure half as wide, so that its text, shown about 400 px wide, keeps a readable size where the
wide figure's would shrink to a third (NARROW_MIN_PX). Every run's line carries markers of its own
shape, placed at different steps from the other runs', so that runs with equal values stay
visible where their lines lie on each other."""

from __future__ import annotations

import math
from dataclasses import dataclass

from slurmgen.observe.report import Run, printable


@dataclass(frozen=True)
class Size:
    width: float  # inches
    dpi: int  # the PNG's pixels per inch
    narrow: bool


WIDE = Size(9.0, 100, narrow=False)  # 900 px, shown at 900 px on a desktop
NARROW = Size(4.5, 200, narrow=True)  # 900 px, shown at the phone's width
NARROW_SHOWN_PX = 400  # about what a phone gives the figure (a 420 px screen less the margins)
NARROW_MIN_PX = 10  # the smallest text (tick labels) at NARROW_SHOWN_PX, in CSS pixels

MARKERS = "osD^vp<>hX"  # "*" marks the best loss
MARKED_POINTS = 12  # about this many markers on a line


def marker(i: int) -> str:
    return MARKERS[i % len(MARKERS)]


def markevery(i: int, n_runs: int, n_points: int):
    """Every stride-th point from an offset of the run's own: run i's markers fall between run i-1's,
    so on lines with equal values each run still shows its markers."""
    k = max(1, min(n_runs, len(MARKERS)))
    stride = max(k, math.ceil(n_points / MARKED_POINTS))
    return ((i % k) * stride // k, stride)


def _line_style(i: int, runs: list[Run], n_points: int) -> dict:
    return {"color": color(i), "marker": marker(i), "markersize": 5, "markerfacecolor": "white",
            "markeredgewidth": 1.2, "markevery": markevery(i, len(runs), n_points)}


def label(name: str) -> str:
    # matplotlib reads $...$ as math and hides legend labels that start with "_".
    name = printable(name).replace("$", r"\$")
    return " " + name if name.startswith("_") else name


def color(i: int) -> str:
    return f"C{i % 10}"


def _mark_interruptions(ax, runs: list[Run], with_text: bool) -> None:
    """A dotted vertical line in the run's colour where it resumed, labelled with the cause."""
    for i, run in enumerate(runs):
        for stop in run.context.interruptions:
            ax.axvline(stop.step, color=color(i), linestyle=":", linewidth=1.5)
            if with_text:
                ax.text(stop.step, 0.98, " " + label(stop.cause), transform=ax.get_xaxis_transform(),
                        rotation=90, ha="right", va="top", fontsize="small", color=color(i),
                        bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.7, "pad": 1})


def _legend(fig, ax, size: Size, columns: int) -> None:
    """On a wide figure inside the axes; on a narrow one below them, where it hides no line."""
    if size.narrow:
        fig.legend(*ax.get_legend_handles_labels(), loc="outside lower center", fontsize="small",
                   ncol=2 if len(ax.get_legend_handles_labels()[0]) > 3 else 1)
    else:
        ax.legend(fontsize="small", ncol=columns)


def loss_figure(Figure, runs: list[Run], size: Size = WIDE):
    fig = Figure(figsize=(size.width, 4.4 if size.narrow else 5), layout="constrained")
    ax = fig.add_subplot()
    for i, run in enumerate(runs):
        if run.steps:
            ax.plot(run.steps, run.losses, label=label(run.name), **_line_style(i, runs, len(run.steps)))
        if run.eval_steps:
            ax.plot(run.eval_steps, run.eval_losses, linestyle="--", label=label(f"{run.name} (eval)"),
                    **_line_style(i, runs, len(run.eval_steps)))
        if run.context.best_step is not None:
            ax.plot([run.context.best_step], [run.context.best_loss], color=color(i), marker="*",
                    markersize=10, linestyle="none")
    _mark_interruptions(ax, runs, with_text=True)
    if any(r.context.interruptions for r in runs):
        ax.plot([], [], color="0.4", linestyle=":", label="resumed after an interruption")
    if ax.get_legend_handles_labels()[0]:
        _legend(fig, ax, size, 1 + len(runs) // 12)
    else:
        ax.text(0.5, 0.5, "no loss logged yet", ha="center", va="center", transform=ax.transAxes)
    ax.set(title="Loss against step (star: best loss)", xlabel="step", ylabel="loss")
    ax.grid(alpha=0.3)
    return fig


def throughput_figure(Figure, runs: list[Run], size: Size = WIDE):
    """Above: samples/s against step for every run (interruptions marked); below: each run's
    samples/s (and tokens/s where logged) as bars, best run on top (side by side on a wide figure,
    one above the other on a narrow one)."""
    metrics = [("samples_per_second", "samples/s")]
    if any(r.tokens_per_second is not None for r in runs):
        metrics.append(("tokens_per_second", "tokens/s"))
    bars_height = 1.2 + 0.4 * len(runs)
    top = 3.4 if size.narrow else 3.8
    if size.narrow:
        fig = Figure(figsize=(size.width, top + 0.6 + bars_height * len(metrics)), layout="constrained")
        grid = fig.add_gridspec(1 + len(metrics), 1, height_ratios=[top] + [bars_height] * len(metrics))
        cells = [grid[1 + i, 0] for i in range(len(metrics))]
    else:
        fig = Figure(figsize=(size.width, top + bars_height), layout="constrained")
        grid = fig.add_gridspec(2, len(metrics), height_ratios=[top, bars_height])
        cells = [grid[1, i] for i in range(len(metrics))]
    ax = fig.add_subplot(grid[0, :])
    for i, run in enumerate(runs):
        if run.context.tput_steps:
            ax.plot(run.context.tput_steps, run.context.tput, label=label(run.name),
                    **_line_style(i, runs, len(run.context.tput_steps)))
    _mark_interruptions(ax, runs, with_text=False)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize="small", ncol=1 + len(runs) // 8)  # the bars below take the figure's foot
        ax.set_ylim(0, ax.get_ylim()[1] * 1.06)  # from 0, and room for the top markers
    else:
        ax.text(0.5, 0.5, "no samples/s logged yet", ha="center", va="center", transform=ax.transAxes)
    ax.set(title="samples/s over the run (dotted: resumed)", xlabel="step", ylabel="samples/s")
    ax.grid(alpha=0.3)
    names = [label(r.name) for r in runs]
    for i, (attr, unit) in enumerate(metrics):
        ax = fig.add_subplot(cells[i])
        values = [getattr(r, attr) for r in runs]
        # Positions, not names: two sweeps may each have a run called seed1.
        bars = ax.barh(range(len(runs)), [v or 0.0 for v in values], color=f"C{i}")
        ax.set_yticks(range(len(runs)), names)
        ax.bar_label(bars, labels=["n/a" if v is None else f"{v:,.1f}" for v in values], padding=3,
                     fontsize="small")
        ax.invert_yaxis()  # best run on top, as in the table
        ax.set(title=f"{unit} per run", xlabel=unit)
        ax.margins(x=0.25)
        if i and not size.narrow:
            ax.tick_params(labelleft=False)
    return fig
