"""The report's files: loss.png and throughput.png (matplotlib, imported only here) and a
self-contained report.html: the ranked table, both plots, the settings and each run's context.

The page has no script, no link and no external URL (the plots are inline PNGs). On a narrow screen
(a phone) each table row becomes a card of label: value lines, so every column stays visible, and
each plot is drawn again for that width (report_plots.NARROW: text that stays readable)."""

from __future__ import annotations

import base64
import html
import io
import time
from pathlib import Path
from typing import Optional

from slurmgen.observe.report import KEY_LABELS, ReportError, Run, fmt, rank, steps_text
from slurmgen.observe.report_context import split_settings
from slurmgen.observe.report_plots import NARROW, WIDE, Size, loss_figure, throughput_figure

NONE = "\u2014"  # what a field without data shows


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
    loss_png.write_bytes(_png(loss_figure(Figure, ranked, WIDE), WIDE))
    tput_png.write_bytes(_png(throughput_figure(Figure, ranked, WIDE), WIDE))
    narrow = (_png(loss_figure(Figure, ranked, NARROW), NARROW), _png(throughput_figure(Figure, ranked, NARROW), NARROW))
    page.write_text(page_html(ranked, key, loss_png.read_bytes(), tput_png.read_bytes(), narrow), encoding="utf-8")
    return [loss_png, tput_png, page]


def _png(fig, size: Size) -> bytes:
    # No Software tag: the PNG (and so the page) carries no URL and is reproducible.
    out = io.BytesIO()
    fig.savefig(out, format="png", dpi=size.dpi, metadata={"Software": None})
    return out.getvalue()


CSS = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; max-width: 80em; }
table { border-collapse: collapse; margin: 1em 0; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.7em; vertical-align: top; overflow-wrap: break-word; }
th { background: #f2f2f2; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
table.kv { table-layout: fixed; width: 100%; }
table.kv th { width: 13em; }
.wrap { overflow-x: auto; }  /* a desktop table wider than the window scrolls inside, not the page */
img { max-width: 100%; height: auto; display: block; margin: 1em 0; }
section.run { border-top: 2px solid #ddd; margin-top: 1.5em; }
.note { color: #555; }
.goodput { font-weight: 600; }
@media (min-width: 701px) {  /* a run's name on one line (lr-3e-3 broken after "lr-3e-" misreads) */
  table.summary td[data-label="run"] { white-space: nowrap; }
}
@media (max-width: 700px) {  /* PHONE */
  body { margin: 0.6em; }
  th, td { overflow-wrap: anywhere; }
  table.cards, table.cards tbody, table.cards tr, table.cards td { display: block; width: auto; }
  table.cards thead { position: absolute; width: 1px; height: 1px; overflow: hidden; clip: rect(0 0 0 0); }
  table.cards tr { border: 1px solid #bbb; border-radius: 6px; margin: 0.7em 0; }
  table.cards td { border: none; border-bottom: 1px solid #eee; display: flex; gap: 1em;
                   justify-content: space-between; text-align: right; }
  table.cards td::before { content: attr(data-label); font-weight: 600; text-align: left; color: #444; }
  table.kv th { width: auto; }
  table.kv th, table.kv td { display: block; border: none; }
  table.kv tr { display: block; border-bottom: 1px solid #ddd; padding: 0.2em 0; }
}
"""

SUMMARY = ["rank", "run", "steps", "final loss", "best loss (step)", "eval loss", "samples/s", "tokens/s",
           "goodput", "restarts", "state"]


PHONE = "(max-width: 700px)"  # the width below which tables become cards and plots are narrow


def page_html(ranked: list[Run], key: str, loss_png: bytes, tput_png: bytes,
              narrow: Optional[tuple[bytes, bytes]] = None) -> str:
    """narrow: the two plots drawn for a phone (report_plots.NARROW), shown below PHONE's width."""
    loss_narrow, tput_narrow = narrow or (None, None)
    e = html.escape
    swept_keys = list(dict.fromkeys(k for r in ranked for k in r.swept))
    head = SUMMARY[:2] + swept_keys + SUMMARY[2:]
    rows = []
    for i, run in enumerate(ranked, 1):
        c = run.context
        values = [(str(i), True), (run.name, False)] + [(run.swept.get(k, ""), False) for k in swept_keys]
        values += [(steps_text(run), True), (fmt(run.final_loss, 4), True), (best_text(run), True),
                   (fmt(run.eval_loss, 4), True), (fmt(run.samples_per_second, 1), True),
                   (fmt(run.tokens_per_second, 1), True), (percent(c.goodput), True),
                   (restarts_text(run), False), (run.state, False)]
        rows.append(_tr(head, values, title=str(run.path)))
    return "\n".join([
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        "<title>slurmgen report</title>", f"<style>{CSS}</style></head><body>",
        f"<h1>slurmgen report: {len(ranked)} run(s)</h1>",
        f'<p class="note">Ranked by {e(KEY_LABELS[key])} (lower is better). Goodput: the share of a '
        "run's allocated time (what its jobs held their nodes for, from the job runtime's record; "
        "without --logs, its wall time from first to last logged step) spent on steps that were kept "
        "(time lost to interruptions, restarts and steps done twice lowers it).</p>",
        _table(head, rows, "cards summary"),
        "<h2>Loss</h2>", _img(loss_png, "loss against step for every run, interruptions marked", loss_narrow),
        '<p class="note">Dotted vertical line: where a run resumed after an interruption, labelled '
        "with its cause; star: the run's best loss.</p>",
        "<h2>Throughput</h2>", _img(tput_png, "samples per second over each run, and per run", tput_narrow),
        *settings_html(ranked),
        "<h2>Runs</h2>", *[run_html(run) for run in ranked],
        "</body></html>", ""])


def settings_html(ranked: list[Run]) -> list[str]:
    """What differs between runs first (a column per setting), then what every run shares."""
    differ, same = split_settings([r.context for r in ranked])
    parts = ["<h2>Settings</h2>",
             '<p class="note">As the output directories record them: sweep.json, the newest complete '
             "checkpoint's trainer_state.json, progress.jsonl and metrics.json.</p>"]
    if differ:
        head = ["run"] + differ
        rows = [_tr(head, [(r.name, False)] + [(r.context.settings.get(k, NONE), False) for k in differ])
                for r in ranked]
        parts += ["<h3>Different between runs</h3>", _table(head, rows, "cards settings-differ")]
    if same:
        title = "The same in every run" if len(ranked) > 1 else "Recorded settings"
        parts += [f"<h3>{title}</h3>", _kv(list(same.items()))]
    if not differ and not same:
        parts.append(f"<p>{NONE}</p>")
    return parts


def run_html(run: Run) -> str:
    e, c = html.escape, run.context
    per_node = NONE
    if c.ranks_per_host:
        size = c.world_size or sum(c.ranks_per_host.values())
        per_node = "; ".join(
            f"{host}: {n} rank{'s' if n != 1 else ''}"
            + (f", {run.samples_per_second * n / size:,.1f}" if run.samples_per_second and size else "")
            for host, n in c.ranks_per_host.items())
        if run.samples_per_second and size:
            per_node += " (the run's samples/s times the node's share of the ranks: each takes the same batch)"
    training = NONE if c.training_seconds is None else duration(c.training_seconds)
    rows = [
        ("directory", str(run.path)),
        ("job ids", ", ".join(c.job_ids) or NONE),
        ("job logs", ", ".join(str(p) for p in c.logs) or "none given or found (--logs)"),
        ("code (snapshot, commit)", code_text(c.starts)),
        ("world size", NONE if c.world_size is None else str(c.world_size)),
        ("nodes: ranks, samples/s", per_node),
        ("start (first logged step)", when(c.first_time)),
        ("end (last logged step)", when(c.last_time)),
        ("wall time", NONE if c.wall_seconds is None else duration(c.wall_seconds)),
        ("allocated time (nodes held)", NONE if c.allocated_seconds is None else duration(c.allocated_seconds)),
        ("training time", training),
        ("goodput", percent(c.goodput)),
        ("attempts", str(c.attempts) if c.attempts else NONE),
        ("restarts", restarts_text(run)),
        ("best loss (step)", best_text(run)),
        ("final loss", fmt(run.final_loss, 4)),
        ("state", run.state),
    ]
    parts = [f'<section class="run"><h3>{e(run.name)}</h3>', _kv(rows)]
    if c.restarts:
        head = ["#", "job", "batch host", "resumed from step", "why the run before ended"]
        body = [_tr(head, [(str(k), True), (s.job, False), (s.host, False),
                           (NONE if s.resumed_step is None else str(s.resumed_step), True),
                           (s.cause or "unknown", False)])
                for k, s in enumerate(c.restarts, 1)]
        parts += ["<h4>Restarts</h4>", _table(head, body, "cards restarts")]
    elif c.interruptions:
        head = ["#", "resumed at step", "cause"]
        body = [_tr(head, [(str(k), True), (str(s.step), True), (s.cause, False)])
                for k, s in enumerate(c.interruptions, 1)]
        parts += ["<h4>Interruptions (from progress.jsonl; give --logs for their causes)</h4>",
                  _table(head, body, "cards interruptions")]
    parts += node_figures(c.starts)
    parts.append("</section>")
    return "\n".join(parts)


def node_figures(starts) -> list[str]:
    """Per run of the job and node: the network check's figures and the compute time per step, the
    stragglers marked (from the job runtime's record)."""
    head = ["run", "node", "send GB/s", "receive GB/s", "latency ms", "compute ms/step", "straggler"]
    body = []
    for k, s in enumerate(starts, 1):
        for node in sorted(set(s.network) | set(s.compute)):
            net = s.network.get(node)
            cells = [f"{v:.2f}" for v in net] if net else [NONE] * 3
            body.append(_tr(head, [(str(k), True), (node, False), *((c, True) for c in cells),
                                   (f"{s.compute[node] * 1e3:.1f}" if node in s.compute else NONE, True),
                                   (f"{s.stragglers[node]:.1f}x" if node in s.stragglers else "", False)]))
    return ["<h4>Nodes (network check, compute time)</h4>", _table(head, body, "cards nodes")] if body else []


def best_text(run: Run) -> str:
    c = run.context
    return NONE if c.best_loss is None else f"{c.best_loss:.4f} ({c.best_step})"


def code_text(starts) -> str:
    """The code snapshot(s) the job's runs ran, as their logs say: one, unless the code changed
    between jobs (then each with the job ids that ran it)."""
    codes: dict = {}
    for s in starts:
        if s.code:
            codes.setdefault(s.code, []).append(s.job)
    if len(codes) <= 1:
        return next(iter(codes), "not said (--no-snapshot, a built-in entry point, or no --logs)")
    return "; ".join(f"job {', '.join(dict.fromkeys(jobs))}: {code}" for code, jobs in codes.items())


def restarts_text(run: Run) -> str:
    c = run.context
    if c.starts:
        causes = list(dict.fromkeys(s.cause or "unknown" for s in c.restarts))
        return f"{len(c.restarts)}" + (f" ({', '.join(causes)})" if causes else "")
    return f"{len(c.interruptions)} (causes: no job log)" if c.interruptions else "0"


def percent(value: Optional[float]) -> str:
    return NONE if value is None else f"{100 * value:.1f}%"


def when(stamp: Optional[float]) -> str:
    return NONE if stamp is None else time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(stamp))


def duration(seconds: float) -> str:
    seconds = max(seconds, 0.0)
    if seconds < 60:
        return f"{seconds:.1f} s"
    s = round(seconds)
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def _table(head: list[str], rows: list[str], cls: str) -> str:
    return (f'<div class="wrap"><table class="{cls}"><thead><tr>'
            + "".join(f"<th>{html.escape(h)}</th>" for h in head)
            + "</tr></thead><tbody>\n" + "\n".join(rows) + "\n</tbody></table></div>")


def _tr(head: list[str], values: list[tuple[str, bool]], title: Optional[str] = None) -> str:
    """A row whose cells carry their column's name (data-label), shown beside them on a phone."""
    cells = []
    for name, (text, numeric) in zip(head, values):
        cls = ' class="num"' if numeric else ""
        tip = f' title="{html.escape(title)}"' if title is not None and name == "run" else ""
        cells.append(f'<td{cls} data-label="{html.escape(name)}"{tip}>{html.escape(text)}</td>')
    return "<tr>" + "".join(cells) + "</tr>"


def _kv(rows: list[tuple[str, str]]) -> str:
    return ('<table class="kv"><tbody>\n'
            + "\n".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in rows)
            + "\n</tbody></table>")


def _data(png: bytes) -> str:
    return f"data:image/png;base64,{base64.b64encode(png).decode('ascii')}"


def _img(png: bytes, alt: str, narrow: Optional[bytes] = None) -> str:
    """The plot; with narrow, a picture whose phone-width source is the plot drawn for a phone."""
    img = f'<img alt="{alt}" src="{_data(png)}">'
    if narrow is None:
        return img
    return f'<picture><source media="{PHONE}" srcset="{_data(narrow)}">{img}</picture>'
