"""The report's two figures, built on the matplotlib Figure class the HTML writer passes in (this
module imports no matplotlib itself): loss against step with every interruption marked, and
throughput over the run and per run."""

from __future__ import annotations

from slurmgen.observe.report import Run, printable


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


def loss_figure(Figure, runs: list[Run]):
    fig = Figure(figsize=(9, 5), layout="constrained")
    ax = fig.add_subplot()
    for i, run in enumerate(runs):
        if run.steps:
            ax.plot(run.steps, run.losses, color=color(i), label=label(run.name))
        if run.eval_steps:
            ax.plot(run.eval_steps, run.eval_losses, color=color(i), linestyle="--", marker="o",
                    label=label(f"{run.name} (eval)"))
        if run.context.best_step is not None:
            ax.plot([run.context.best_step], [run.context.best_loss], color=color(i), marker="*",
                    markersize=10, linestyle="none")
    _mark_interruptions(ax, runs, with_text=True)
    if any(r.context.interruptions for r in runs):
        ax.plot([], [], color="0.4", linestyle=":", label="resumed after an interruption")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize="small", ncol=1 + len(runs) // 12)
    else:
        ax.text(0.5, 0.5, "no loss logged yet", ha="center", va="center", transform=ax.transAxes)
    ax.set(title="Loss against step (star: best loss)", xlabel="step", ylabel="loss")
    ax.grid(alpha=0.3)
    return fig


def throughput_figure(Figure, runs: list[Run]):
    """Above: samples/s against step for every run (interruptions marked); below: each run's
    samples/s (and tokens/s where logged) as bars, best run on top."""
    metrics = [("samples_per_second", "samples/s")]
    if any(r.tokens_per_second is not None for r in runs):
        metrics.append(("tokens_per_second", "tokens/s"))
    bars_height = 1.2 + 0.4 * len(runs)
    fig = Figure(figsize=(9, 3.8 + bars_height), layout="constrained")
    grid = fig.add_gridspec(2, len(metrics), height_ratios=[3.8, bars_height])
    ax = fig.add_subplot(grid[0, :])
    for i, run in enumerate(runs):
        if run.context.tput_steps:
            ax.plot(run.context.tput_steps, run.context.tput, color=color(i), label=label(run.name))
    _mark_interruptions(ax, runs, with_text=False)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize="small", ncol=1 + len(runs) // 8)
        ax.set_ylim(bottom=0)
    else:
        ax.text(0.5, 0.5, "no samples/s logged yet", ha="center", va="center", transform=ax.transAxes)
    ax.set(title="samples/s over the run (dotted: resumed)", xlabel="step", ylabel="samples/s")
    ax.grid(alpha=0.3)
    names = [label(r.name) for r in runs]
    for i, (attr, unit) in enumerate(metrics):
        ax = fig.add_subplot(grid[1, i])
        values = [getattr(r, attr) for r in runs]
        # Positions, not names: two sweeps may each have a run called seed1.
        bars = ax.barh(range(len(runs)), [v or 0.0 for v in values], color=f"C{i}")
        ax.set_yticks(range(len(runs)), names)
        ax.bar_label(bars, labels=["n/a" if v is None else f"{v:,.1f}" for v in values], padding=3,
                     fontsize="small")
        ax.invert_yaxis()  # best run on top, as in the table
        ax.set(title=f"{unit} per run", xlabel=unit)
        ax.margins(x=0.25)
        if i:
            ax.tick_params(labelleft=False)
    return fig
