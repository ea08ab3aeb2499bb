"""`slurmgen report` with each run's context: interruptions from progress.jsonl and the job logs (their
causes, job ids, restarts), goodput, best loss, settings and nodes, and the page at phone width."""
import json
import os
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from slurmgen.observe.report import ReportError, find_runs, terminal_table
from slurmgen.observe.report_html import write_report
from tests.conftest import need, skip_or_fail

pytestmark = pytest.mark.unit

T0 = 1_700_000_000.0
HOSTS = {"node1": 1, "node2": 1, "node3": 2, "node4": 2}


def line(step, t, loss, sps=None):
    sps = 40.0 + step % 7 if sps is None else sps
    return {"step": step, "max_steps": 40, "loss": loss, "samples_per_second": sps, "time": t}


def write_run(root, name, lines, swept, *, finished=True, checkpoint=40):
    run = root / name
    run.mkdir(parents=True)
    (run / "progress.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    (run / "sweep.json").write_text(json.dumps(swept))
    if finished:
        (run / "metrics.json").write_text(json.dumps({
            "world_size": 6, "global_step": 40, "train_loss": 1.5, "last_loss": lines[-1]["loss"],
            "samples_per_second": 48.0, "tokens_per_second": None, "ranks_per_host": HOSTS,
            "stopped_early": False}))
    ckpt = run / f"checkpoint-{checkpoint}"
    ckpt.mkdir()
    (ckpt / "trainer_state.json").write_text(json.dumps({
        "train_batch_size": 4, "logging_steps": 2.0, "save_steps": 10, "max_steps": 40, "num_train_epochs": 1,
        "log_history": []}))
    (ckpt / "slurmgen_complete").write_text("40\n")
    return run


def start_line(job, restart=0):
    return f"slurmgen: job {job} (restart {restart} of at most 3) on node1: world size 6, master node1:2{job}"


@pytest.fixture
def sweep(tmp_path):
    """Three runs of a learning-rate sweep: one preempted at step 13 and resumed there (its logged steps
    go on counting up), one that crashed on node3 at step 25 and resumed from step 20 (the steps go
    back), one never interrupted; each with its job log in logs/."""
    runs, logs = tmp_path / "runs", tmp_path / "logs"
    logs.mkdir()
    # Preempted: steps 2..12 at 2 s per line, 300 s lost (stop, queue, start-up), then 14..40.
    first = [line(s, T0 + s, 3.0 - 0.04 * s) for s in range(2, 13, 2)]
    second = [line(s, T0 + 300 + s, 3.0 - 0.04 * s) for s in range(14, 41, 2)]
    write_run(runs, "lr-1e-3", first + second, {"learning_rate": "1e-3"})
    (logs / "sweep-101.out").write_text("\n".join([
        start_line(101), 'slurmgen: sweep run 0: {"learning_rate": "1e-3"} -> runs/lr-1e-3',
        "slurmgen-train: fresh start", "{'loss': '2.9'}",
        "slurmgen: time limit or preemption warning: asking every rank to checkpoint",
        "slurmgen: checkpoint saved at step 13; job 101 preempted: Slurm requeues it",
        start_line(101), 'slurmgen: sweep run 0: {"learning_rate": "1e-3"} -> runs/lr-1e-3',
        f"slurmgen-train: resuming from {runs}/lr-1e-3/checkpoint-13 at step 13",
        "slurmgen: all components finished"]) + "\n")
    # Crashed at 25 (logged up to 24), resumed from checkpoint 20: 22 and 24 again, 200 s later.
    first = [line(s, T0 + s, 2.5 - 0.03 * s) for s in range(2, 25, 2)]
    second = [line(s, T0 + 200 + s, 2.4 - 0.03 * s) for s in range(22, 41, 2)]
    write_run(runs, "lr-3e-3", first + second, {"learning_rate": "3e-3"})
    (logs / "sweep-102.out").write_text("\n".join([
        start_line(102), 'slurmgen: sweep run 1: {"learning_rate": "3e-3"} -> runs/lr-3e-3',
        "srun: error: node3: task 2: Exited with exit code 139",
        "slurmgen: failure 1 of at most 3 (crash on node3): requeueing job 102 to resume from its newest "
        "checkpoint",
        start_line(102), 'slurmgen: sweep run 1: {"learning_rate": "3e-3"} -> runs/lr-3e-3',
        f"slurmgen-train: resuming from {runs}/lr-3e-3/checkpoint-20 at step 20",
        "slurmgen: all components finished"]) + "\n")
    write_run(runs, "lr-1e-4", [line(s, T0 + s, 3.0 - 0.01 * s) for s in range(2, 41, 2)], {"learning_rate": "1e-4"})
    (logs / "sweep-103.out").write_text("\n".join([
        start_line(103), 'slurmgen: sweep run 2: {"learning_rate": "1e-4"} -> runs/lr-1e-4',
        "slurmgen: all components finished"]) + "\n")
    (logs / "notes.txt").write_text("not a job log\n")
    return runs, logs


def by_name(runs):
    return {r.name: r for r in runs}


def test_interruptions_are_found_and_their_causes_read_from_the_logs(sweep):
    runs_dir, logs = sweep
    runs = by_name(find_runs([str(runs_dir)], [str(logs)]))
    pre, crash, clean = runs["lr-1e-3"].context, runs["lr-3e-3"].context, runs["lr-1e-4"].context
    # The preempted run's steps never went back: the log's resume step and the pause place it.
    assert [(i.step, i.cause) for i in pre.interruptions] == [(13, "preemption")]
    assert [(i.step, i.cause) for i in crash.interruptions] == [(20, "crash on node3")]
    assert clean.interruptions == [] and clean.attempts == 1
    assert (pre.attempts, crash.attempts) == (2, 2)
    assert pre.job_ids == ["101"] and crash.job_ids == ["102"] and clean.job_ids == ["103"]
    assert [(s.job, s.host, s.resumed_step, s.cause) for s in crash.restarts] == [("102", "node1", 20, "crash on node3")]
    assert [p.name for p in pre.logs] == ["sweep-101.out"]


def test_goodput_counts_kept_steps_against_wall_time(sweep):
    runs_dir, logs = sweep
    runs = by_name(find_runs([str(runs_dir)], [str(logs)]))
    pre, crash, clean = runs["lr-1e-3"].context, runs["lr-3e-3"].context, runs["lr-1e-4"].context
    # Preempted: 2..12 (10 s) and 14..40 (26 s) of 2 s .. 340 s.
    assert pre.wall_seconds == pytest.approx(338.0)
    assert pre.training_seconds == pytest.approx(36.0)
    assert pre.goodput == pytest.approx(36.0 / 338.0)
    # Crashed: 22 and 24 of the first attempt were done again, so only 2..20 (18 s) of it counts.
    assert crash.training_seconds == pytest.approx(18.0 + 18.0)
    assert crash.goodput == pytest.approx(36.0 / 238.0)
    assert clean.goodput == pytest.approx(1.0)


def test_goodput_counts_against_allocated_time_when_the_runtime_recorded_the_runs(sweep):
    """The job runtime's record beside the log gives each run's held time: the preempted run's two
    runs held their nodes 15 s and 30 s (its queue wait between them is not allocated time)."""
    from slurmgen.job.record import JobFiles, JobRecord, RunRecord

    runs_dir, logs = sweep
    files = JobFiles.of(logs, "101")
    files.folder.mkdir(parents=True)
    JobRecord(runs=[RunRecord(1000.0, ["node1"], 1015.0, "preempted"),
                    RunRecord(2000.0, ["node1"], 2030.0, "finished")]).save(files.record)
    pre = by_name(find_runs([str(runs_dir)], [str(logs)]))["lr-1e-3"].context
    assert [s.seconds for s in pre.starts] == [15.0, 30.0] and pre.allocated_seconds == 45.0
    assert pre.goodput == pytest.approx(36.0 / 45.0)
    from slurmgen.observe.report_html import write_report
    page = write_report([r for r in find_runs([str(runs_dir)], [str(logs)]) if r.name == "lr-1e-3"], runs_dir / "out")[-1]
    assert "allocated time (nodes held)" in page.read_text() and "80.0%" in page.read_text()
    JobRecord(runs=[RunRecord(1000.0, ["node1"], 1015.0, "preempted")]).save(files.record)  # does not pair up
    pre = by_name(find_runs([str(runs_dir)], [str(logs)]))["lr-1e-3"].context
    assert pre.allocated_seconds is None and pre.goodput == pytest.approx(36.0 / 338.0)


def test_the_network_check_and_the_stragglers_appear_per_run_and_node(sweep):
    """The runtime's record of each run's network check and compute times: one row per run and
    node, the straggler marked with its ratio."""
    from slurmgen.job.record import JobFiles, JobRecord, RunRecord

    runs_dir, logs = sweep
    files = JobFiles.of(logs, "101")
    files.folder.mkdir(parents=True)
    first = RunRecord(1000.0, ["node1", "node3"], 1015.0, "preempted", network={"node1": [1.6, 1.5, 0.1],
                      "node3": [0.01, 0.01, 0.2]}, compute={"node1": 0.012, "node3": 0.031}, stragglers={"node3": 2.6})
    JobRecord(runs=[first, RunRecord(2000.0, ["node1"], 2030.0, "finished")]).save(files.record)
    page = write_report([r for r in find_runs([str(runs_dir)], [str(logs)]) if r.name == "lr-1e-3"],
                        runs_dir / "out")[-1].read_text()
    table = page[page.index("Nodes (network check, compute time)"):]
    rows = [re.sub(r"<[^>]+>", " ", row).split() for row in re.findall(r"<tr>(.*?)</tr>", table, re.S)[1:]]
    assert rows[:2] == [["1", "node1", "1.60", "1.50", "0.10", "12.0"], ["1", "node3", "0.01", "0.01", "0.20", "31.0", "2.6x"]]


def test_best_loss_settings_and_nodes(sweep):
    runs_dir, logs = sweep
    runs = by_name(find_runs([str(runs_dir)], [str(logs)]))
    crash = runs["lr-3e-3"]
    assert (crash.context.best_loss, crash.context.best_step) == (pytest.approx(2.4 - 0.03 * 40), 40)
    assert crash.context.settings == {"learning_rate": "3e-3", "logging_steps": "2", "max_steps": "40",
                                      "num_train_epochs": "1", "per_device_train_batch_size": "4",
                                      "save_steps": "10", "world_size": "6"}
    assert crash.context.ranks_per_host == HOSTS and crash.context.world_size == 6
    assert crash.context.tput_steps[-1] == 40 and len(crash.context.tput) == 20  # kept lines only


def test_without_logs_interruptions_where_steps_go_back_and_no_causes(sweep):
    runs_dir, _ = sweep
    runs = by_name(find_runs([str(runs_dir)]))
    assert [(i.step, i.cause) for i in runs["lr-3e-3"].context.interruptions] == [(22, "interrupted")]
    # A resume exactly where the run stopped needs the job log to be seen.
    assert runs["lr-1e-3"].context.interruptions == []
    assert runs["lr-1e-3"].context.job_ids == []


def test_a_log_that_names_no_directory_belongs_to_the_one_run_reported(tmp_path):
    run = write_run(tmp_path, "single", [line(s, T0 + s, 1.0) for s in range(2, 11, 2)], {})
    log = tmp_path / "slurmgen-77.out"
    log.write_text(start_line(77) + "\nslurmgen-train: fresh start\nslurmgen: all components finished\n")
    (tmp_path / "other-78.out").write_text(start_line(78) + "\n")
    assert find_runs([str(run)], [str(log)])[0].context.job_ids == ["77"]
    # Two logs that name no directory: neither is taken.
    assert find_runs([str(run)], [str(tmp_path)])[0].context.job_ids == []


def test_a_restart_on_a_spare_is_a_run_of_its_own_with_its_cause(tmp_path):
    """--spares: the components start again inside the same job; the log line says why and which
    node the spare replaced (slurmgen.job.replace)."""
    from slurmgen.observe.report_logs import read_log

    log = tmp_path / "slurmgen-77.out"
    log.write_text(start_line(77) + "\nslurmgen-train: fresh start\n"
                   "slurmgen: failure 1 of at most 2 (node on node3): restarting every component inside the allocation"
                   " from the newest checkpoint; node3 (no step started) replaced by spare node5\n"
                   "slurmgen-train: resuming from /runs/x/checkpoint-5 at step 5\nslurmgen: all components finished\n")
    first, second = read_log(log).starts
    assert (first.job, first.fresh, first.ended) == ("77", True, "node on node3, replaced: node3 by node5")
    assert (second.job, second.resumed_step, second.cause, second.ended) == ("77", 5, first.ended, "finished")


def test_a_missing_logs_path_is_one_line(sweep):
    runs_dir, logs = sweep
    with pytest.raises(ReportError) as err:
        find_runs([str(runs_dir)], [str(logs / "nope")])
    assert str(err.value) == (f"report: --logs {logs / 'nope'}: no such file or directory; expected a job log "
                              "(the sbatch --output file) or the --log-dir that holds them")


def test_terminal_table_shows_goodput_and_restarts(sweep):
    runs_dir, logs = sweep
    lines = terminal_table(find_runs([str(runs_dir)], [str(logs)])).splitlines()
    assert lines[1].split()[10:13] == ["goodput", "restarts", "state"]  # "final loss", "eval loss": two words
    row = next(x for x in lines if "lr-1e-3" in x).split()
    assert row[8:10] == ["11%", "1"]


class Page(HTMLParser):
    """Tables of the page: each as (class, header cells, rows of (data-label, text))."""

    def __init__(self):
        super().__init__()
        self.tables, self.imgs, self.cell, self.th = [], [], None, None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "table":
            self.tables.append({"class": a.get("class", ""), "head": [], "rows": []})
        elif tag == "tr" and self.tables:
            self.tables[-1]["rows"].append([])
        elif tag == "th":
            self.th = ""
        elif tag == "td":
            self.cell = [a.get("data-label"), ""]
        elif tag == "img":
            self.imgs.append(a)

    def handle_endtag(self, tag):
        if tag == "th" and self.th is not None:
            self.tables[-1]["head"].append(self.th)
            self.th = None
        elif tag == "td" and self.cell is not None:
            self.tables[-1]["rows"][-1].append(tuple(self.cell))
            self.cell = None

    def handle_data(self, data):
        if self.th is not None:
            self.th += data
        if self.cell is not None:
            self.cell[1] += data


def parse(page):
    p = Page()
    p.feed(page)
    return p


def test_page_shows_every_column_goodput_and_each_runs_context(sweep, tmp_path):
    runs_dir, logs = sweep
    write_report(find_runs([str(runs_dir)], [str(logs)]), tmp_path / "out")
    text = (tmp_path / "out" / "report.html").read_text()
    page = parse(text)
    summary = next(t for t in page.tables if "summary" in t["class"])
    assert summary["head"] == ["rank", "run", "learning_rate", "steps", "final loss", "best loss (step)",
                               "eval loss", "samples/s", "tokens/s", "goodput", "restarts", "state"]
    rows = {dict(r)["run"]: dict(r) for r in summary["rows"][1:]}
    # Every cell carries its column's name: a phone shows it beside the value.
    assert all([label for label, _ in r] == summary["head"] for r in summary["rows"][1:])
    assert rows["lr-1e-3"]["goodput"] == "10.7%" and rows["lr-1e-4"]["goodput"] == "100.0%"
    assert rows["lr-1e-3"]["restarts"] == "1 (preemption)" and rows["lr-3e-3"]["restarts"] == "1 (crash on node3)"
    assert rows["lr-3e-3"]["best loss (step)"] == "1.2000 (40)"
    differ = next(t for t in page.tables if "settings-differ" in t["class"])
    assert differ["head"] == ["run", "learning_rate"]
    assert "per_device_train_batch_size" in text and ">world_size<" in text
    restarts = [t for t in page.tables if "restarts" in t["class"]]
    assert len(restarts) == 2
    assert restarts[1]["head"] == ["#", "job", "batch host", "resumed from step", "why the run before ended"]
    assert "node3: 2 ranks, 16.0;" in text  # 48 samples/s, 2 of 6 ranks
    assert "2023-11-14 22:13:22 UTC" in text  # the first logged step
    assert "5 min 38 s" in text  # the preempted run's wall time
    assert len(page.imgs) == 2 and all(i["src"].startswith("data:image/png;base64,") for i in page.imgs)
    assert "http://" not in text and "https://" not in text and "<script" not in text


def test_runs_without_logs_show_dashes(tmp_path):
    run = tmp_path / "bare"
    run.mkdir()
    (run / "metrics.json").write_text(json.dumps({"global_step": 0}))
    write_report(find_runs([str(run)]), tmp_path / "out")
    text = (tmp_path / "out" / "report.html").read_text()
    for field in ("job ids", "start (first logged step)", "goodput", "nodes: ranks, samples/s", "best loss (step)"):
        assert re.search(rf"<th>{re.escape(field)}</th><td>\u2014</td>", text), field


def test_values_from_logs_are_escaped(tmp_path):
    run = write_run(tmp_path, "r", [line(2, T0, 2.0), line(4, T0 + 2, 1.0), line(2, T0 + 300, 2.0)], {})
    log = tmp_path / "x.out"
    log.write_text("\n".join([start_line(5), "slurmgen: failure 1 of at most 3 (crash on <b>n1</b>): requeueing job 5",
                              start_line(5).replace("node1", "<i>h</i>"),
                              f"slurmgen-train: resuming from {run}/checkpoint-2 at step 2"]) + "\n")
    write_report(find_runs([str(run)], [str(log)]), tmp_path / "out")
    text = (tmp_path / "out" / "report.html").read_text()
    assert "<b>" not in text and "<i>" not in text and "&lt;i&gt;h&lt;/i&gt;" in text


# ---- the page in a browser, at phone and desktop width ------------------------------------------------

def chromium():
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if not found:
        skip_or_fail("no chromium on PATH (apt-get install chromium; .ci/run installs it)")
    return found


def screenshot(browser, page: Path, png: Path, width: int, height: int = 5000):
    subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    f"--screenshot={png}", f"--window-size={width},{height}", page.as_uri()],
                   check=True, capture_output=True, timeout=120, env={**os.environ, "HOME": str(png.parent)})
    return png


@pytest.mark.parametrize("width", [420, 1280])
def test_page_in_chromium_uses_its_width_and_cuts_nothing_off(sweep, tmp_path, width):
    """The screenshot's rightmost columns stay background: nothing is wider than the screen."""
    np = need("numpy")
    image = need("matplotlib.image")
    browser = chromium()
    runs_dir, logs = sweep
    write_report(find_runs([str(runs_dir)], [str(logs)]), tmp_path / "out")
    png = screenshot(browser, tmp_path / "out" / "report.html", tmp_path / f"page-{width}.png", width)
    pixels = image.imread(png)[..., :3]
    assert pixels.shape[1] == width
    ink = np.where((pixels < 0.9).any(axis=2).any(axis=0))[0]
    assert ink.size and ink.max() < width - 2, f"something reaches the right edge at {width} px"
    keep = os.environ.get("SLURMGEN_REPORT_SHOTS")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(png, Path(keep) / png.name)


def shown_plot(browser, page: Path, width: int) -> list[str]:
    """Which source each plot's <img> shows in Chromium at this width: "phone" (the <picture>'s
    source) or "desktop" (its own src). A copy of the page gets a script that writes it down."""
    probe = page.with_name(f"probe-{width}.html")
    probe.write_text(page.read_text().replace("</body>", (
        "<script>addEventListener('load', () => { const d = document.createElement('pre'); d.id = 'shown';"
        " d.textContent = [...document.querySelectorAll('picture')].map(p => p.querySelector('img').currentSrc"
        " === p.querySelector('source').srcset ? 'phone' : 'desktop').join(' '); document.body.append(d); });"
        "</script></body>")))
    done = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", f"--window-size={width},900",
                           "--virtual-time-budget=3000", "--dump-dom", probe.as_uri()], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "HOME": str(page.parent)}, check=True)
    return re.search(r'<pre id="shown">([^<]*)</pre>', done.stdout).group(1).split()


@pytest.mark.parametrize("width, shown", [(420, "phone"), (1280, "desktop")])
def test_a_phone_gets_the_plots_drawn_for_its_width(sweep, tmp_path, width, shown):
    browser = chromium()
    need("matplotlib")
    runs_dir, logs = sweep
    write_report(find_runs([str(runs_dir)], [str(logs)]), tmp_path / "out")
    assert shown_plot(browser, tmp_path / "out" / "report.html", width) == [shown, shown]


def _texts_px(fig, shown_px: float) -> dict:
    """Every visible text of the drawn figure (tick labels, titles, legend) and its size in CSS px
    when the figure is shown shown_px wide."""
    fig.draw_without_rendering()  # tick labels exist once drawn
    scale = shown_px / (fig.get_size_inches()[0] * 72)
    texts = [t for t in fig.findobj(lambda a: hasattr(a, "get_fontsize") and hasattr(a, "get_text"))
             if t.get_visible() and t.get_text().strip()]
    return {t.get_text(): t.get_fontsize() * scale for t in texts}


def test_phone_plots_keep_readable_text(sweep):
    """Shown about 400 px wide, the desktop figures' tick labels are about 6 px (unreadable); the
    figures drawn for a phone keep every text at NARROW_MIN_PX or more."""
    figure = need("matplotlib.figure")
    from slurmgen.observe.report import rank
    from slurmgen.observe.report_plots import NARROW, NARROW_MIN_PX, NARROW_SHOWN_PX, WIDE, loss_figure, \
        throughput_figure

    runs_dir, logs = sweep
    ranked, _ = rank(find_runs([str(runs_dir)], [str(logs)]))
    for draw in (loss_figure, throughput_figure):
        wide = _texts_px(draw(figure.Figure, ranked, WIDE), NARROW_SHOWN_PX)
        assert min(wide.values()) < 7  # why a phone needs its own figure
        narrow = _texts_px(draw(figure.Figure, ranked, NARROW), NARROW_SHOWN_PX)
        assert len(narrow) > 10 and "step" in narrow and "lr-1e-3" in narrow
        small = {text: round(px, 1) for text, px in narrow.items() if px < NARROW_MIN_PX}
        assert small == {}, f"{draw.__name__}: text under {NARROW_MIN_PX} px on a phone"


def test_runs_with_equal_values_stay_visible(sweep):
    """The sweep's three runs log the same samples/s at the same steps: each line carries markers
    of its own shape, at steps where no other run has one, so no line hides another."""
    figure = need("matplotlib.figure")
    from slurmgen.observe.report import rank
    from slurmgen.observe.report_plots import NARROW, WIDE, loss_figure, throughput_figure

    runs_dir, logs = sweep
    ranked, _ = rank(find_runs([str(runs_dir)], [str(logs)]))
    for draw in (loss_figure, throughput_figure):
        for size in (WIDE, NARROW):
            ax = draw(figure.Figure, ranked, size).axes[0]
            lines = [ln for ln in ax.lines if ln.get_label() in {r.name for r in ranked}]
            assert len(lines) == 3
            shapes = [ln.get_marker() for ln in lines]
            assert all(s not in (None, "", " ", "None", "none") for s in shapes) and len(set(shapes)) == 3
            marked = []
            for ln in lines:
                start, stride = ln.get_markevery()
                marked.append(set(ln.get_xdata()[start::stride]))
                assert len(marked[-1]) >= 3, ln.get_label()
            if draw is throughput_figure:  # equal values: no marker where another run's is
                assert all(not (a & b) for i, a in enumerate(marked) for b in marked[i + 1:])


def test_loss_chart_marks_each_resume_with_its_cause(sweep):
    figure = need("matplotlib.figure")
    from slurmgen.observe.report import rank
    from slurmgen.observe.report_plots import loss_figure

    runs_dir, logs = sweep
    ranked, _ = rank(find_runs([str(runs_dir)], [str(logs)]))
    ax = loss_figure(figure.Figure, ranked).axes[0]
    vertical = sorted(ln.get_xdata()[0] for ln in ax.lines if len(set(ln.get_xdata())) == 1
                      and ln.get_linestyle() == ":")
    assert vertical == [13, 20]
    assert {t.get_text().strip() for t in ax.texts} == {"preemption", "crash on node3"}


def test_cli_report_with_logs_and_a_bad_logs_path(sweep, render_args, tmp_path):
    runs_dir, logs = sweep
    result = render_args("report", str(runs_dir), "--logs", str(logs), "-o", str(tmp_path / "out"))
    assert result.exit_code == 0, result.output
    assert "goodput" in result.output.splitlines()[1] and (tmp_path / "out" / "report.html").is_file()
    result = render_args("report", str(runs_dir), "--logs", str(tmp_path / "nope"))
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        f"slurmgen: error: report: --logs {tmp_path / 'nope'}: no such file or directory; expected a job log "
        "(the sbatch --output file) or the --log-dir that holds them"]
