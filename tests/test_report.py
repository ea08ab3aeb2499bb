"""slurmgen.observe.report: finding runs, ranking them, the terminal table and the HTML report."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from slurmgen.observe.report import ReportError, find_runs, rank, terminal_table
from slurmgen.observe.report_html import write_report
from tests.conftest import need

pytestmark = pytest.mark.unit

# (name, swept values, losses logged at steps 5, 10, ..., eval_loss in metrics.json or None)
RUNS = [
    ("lr1e-3_seed1", {"learning_rate": "1e-3", "seed": "1"}, [2.0, 1.5, 1.1, 0.9], 1.00),
    ("lr1e-4_seed1", {"learning_rate": "1e-4", "seed": "1"}, [2.0, 1.9, 1.8, 1.7], 1.60),
    ("lr3e-3_seed1", {"learning_rate": "3e-3", "seed": "1"}, [2.0, 1.2, 0.8, 0.6], 1.20),
]


def make_run(parent, name, swept, losses, eval_loss=None, finished=True, extra_lines=()):
    """A run dir as train/outputs.py writes it (ProgressLog lines, finish()'s metrics.json)."""
    run = parent / name
    run.mkdir(parents=True)
    lines = []
    for i, loss in enumerate(losses, 1):
        line = {"step": 5 * i, "max_steps": 5 * len(losses), "loss": loss,
                "samples_per_second": 100.0 + i, "time": 1700000000.0 + i}
        lines.append(json.dumps(line))
    (run / "progress.jsonl").write_text("\n".join([*lines, *extra_lines]) + "\n")
    if swept:
        (run / "sweep.json").write_text(json.dumps(swept))
    if finished:
        metrics = {"world_size": 6, "global_step": 5 * len(losses), "train_loss": sum(losses) / len(losses),
                   "first_loss": losses[0], "last_loss": losses[-1], "samples_per_second": 120.5,
                   "tokens_per_second": 5000.0 + 10 * len(name), "train_runtime": 12.0,
                   "resumed_from_step": None, "stopped_early": False, "ranks_per_host": {"n1": 1},
                   "local_world_sizes": [1], "peak_rss_mb_per_rank": [900.0], "data_prep_seconds": 1.0}
        if eval_loss is not None:
            metrics["eval_loss"] = eval_loss
        (run / "metrics.json").write_text(json.dumps(metrics))
    return run


@pytest.fixture
def sweep(tmp_path):
    parent = tmp_path / "sweep"
    for name, swept, losses, _ in reversed(RUNS):  # creation order must not matter
        make_run(parent, name, swept, losses)
    return parent


def test_find_runs_on_a_parent_reads_every_run_in_name_order(sweep):
    runs = find_runs([str(sweep)])
    assert [r.name for r in runs] == [name for name, *_ in RUNS]
    first = runs[0]
    assert first.swept == {"learning_rate": "1e-3", "seed": "1"}
    assert first.steps == [5, 10, 15, 20] and first.losses == [2.0, 1.5, 1.1, 0.9]
    assert (first.last_step, first.max_steps) == (20, 20)
    assert first.final_loss == 0.9  # metrics.json's last_loss, not the run's mean train_loss
    assert first.samples_per_second == 120.5 and first.tokens_per_second == 5000.0 + 10 * len(first.name)
    assert first.eval_loss is None and first.state == "finished"


def test_find_runs_takes_a_run_dir_and_grandchildren(tmp_path):
    run = make_run(tmp_path / "a", "single", {}, [1.0])
    assert [r.name for r in find_runs([str(run)])] == ["single"]
    make_run(tmp_path / "top" / "sweep_b", "seed10", {}, [1.0])
    make_run(tmp_path / "top" / "sweep_b", "seed2", {}, [1.0])
    make_run(tmp_path / "top", "direct", {}, [1.0])
    names = [r.name for r in find_runs([str(tmp_path / "top")])]
    assert names == ["direct", "sweep_b/seed2", "sweep_b/seed10"]


def test_incomplete_run_uses_progress_means_and_last_loss(tmp_path):
    make_run(tmp_path, "running", {}, [3.0, 2.5], finished=False)
    run = find_runs([str(tmp_path / "running")])[0]
    assert run.state == "running/incomplete"
    assert run.final_loss == 2.5 and run.last_step == 10
    assert run.samples_per_second == pytest.approx(101.5)  # mean of the progress entries
    assert run.tokens_per_second is None


def test_malformed_progress_lines_are_skipped(tmp_path):
    bad = ["{not json", "[1, 2]", '{"loss": 0.1}', '{"step": "x", "loss": 0.1}',
           '{"step": 25, "loss": "nan"}']
    make_run(tmp_path, "torn", {}, [2.0, 1.0], finished=False, extra_lines=[*bad, '{"step": 30, "lo'])
    run = find_runs([str(tmp_path / "torn")])[0]
    assert run.steps == [5, 10] and run.losses == [2.0, 1.0]
    assert run.final_loss == 1.0


def test_requeued_run_keeps_the_newest_logs_and_eval_points(tmp_path):
    lines = [{"step": s, "loss": l} for s, l in [(1, 3.0), (2, 2.0), (3, 1.9), (2, 2.1), (3, 1.8)]]
    lines.append({"step": 3, "eval_loss": 1.95})
    run_dir = tmp_path / "requeued"
    run_dir.mkdir()
    (run_dir / "progress.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    run = find_runs([str(run_dir)])[0]
    assert run.steps == [1, 2, 3] and run.losses == [3.0, 2.1, 1.8]
    assert run.eval_steps == [3] and run.eval_loss == 1.95


def test_rank_by_final_loss_then_by_eval_loss_when_every_run_has_one(tmp_path):
    for name, swept, losses, eval_loss in RUNS:
        make_run(tmp_path / "train", name, swept, losses)
        make_run(tmp_path / "eval", name, swept, losses, eval_loss=eval_loss)
    ranked, key = rank(find_runs([str(tmp_path / "train")]))
    assert key == "final_loss"
    assert [r.name for r in ranked] == ["lr3e-3_seed1", "lr1e-3_seed1", "lr1e-4_seed1"]
    ranked, key = rank(find_runs([str(tmp_path / "eval")]))
    assert key == "eval_loss"
    assert [r.name for r in ranked] == ["lr1e-3_seed1", "lr3e-3_seed1", "lr1e-4_seed1"]


def test_runs_without_a_loss_rank_last(sweep):
    (sweep / "zz_empty").mkdir()
    (sweep / "zz_empty" / "progress.jsonl").write_text("")
    (sweep / "a_diverged").mkdir()
    (sweep / "a_diverged" / "progress.jsonl").write_text('{"step": 1, "loss": NaN}\n')
    ranked, key = rank(find_runs([str(sweep)]))
    assert key == "final_loss"
    assert [r.name for r in ranked][-2:] == ["a_diverged", "zz_empty"]


def test_terminal_table_lists_every_run_in_rank_order(sweep):
    table = terminal_table(find_runs([str(sweep)]))
    lines = table.splitlines()
    assert lines[0] == "ranked by final train loss (lower is better)"
    assert lines[1].split()[:3] == ["rank", "run", "swept"]
    body = [line.split() for line in lines[2:]]
    assert [row[:2] for row in body] == [["1", "lr3e-3_seed1"], ["2", "lr1e-3_seed1"], ["3", "lr1e-4_seed1"]]
    for name, swept, *_ in RUNS:
        row = next(line for line in lines if name in line)
        assert all(f"{k}={v}" in row for k, v in swept.items())
    assert "0.6000" in body[0] and "20/20" in body[0] and "finished" in body[0]


def png_pixels(path):
    image = need("matplotlib.image").imread(path)
    return image.reshape(-1, image.shape[-1])


def test_write_report_writes_a_self_contained_page_with_two_real_plots(sweep, tmp_path):
    np = need("numpy")
    out = tmp_path / "report"
    written = write_report(find_runs([str(sweep)]), out)
    assert sorted(p.name for p in written) == ["loss.png", "report.html", "throughput.png"]
    for png in ("loss.png", "throughput.png"):
        pixels = png_pixels(out / png)
        assert pixels.std() > 0 and len(np.unique(pixels, axis=0)) > 2, png
    page = (out / "report.html").read_text()
    # Each plot twice: drawn for a desktop, and for a phone (a <picture> source below 700 px).
    assert page.count("data:image/png;base64,") == 4 and page.count('<source media="(max-width: 700px)"') == 2
    assert "http://" not in page and "https://" not in page
    assert "<script" not in page and "<link" not in page
    assert "Ranked by final train loss" in page
    for name, swept, *_ in RUNS:
        assert name in page
        assert all(f"<th>{k}</th>" in page and f'<td data-label="{k}">{v}</td>' in page for k, v in swept.items())


def test_write_report_without_tokens_or_losses(tmp_path):
    run = tmp_path / "bare"
    run.mkdir()
    (run / "metrics.json").write_text(json.dumps({"global_step": 0, "train_loss": None}))
    written = write_report(find_runs([str(run)]), tmp_path / "out")
    assert sorted(p.name for p in written) == ["loss.png", "report.html", "throughput.png"]
    assert all(p.stat().st_size > 0 for p in written)
    assert "bare" in (tmp_path / "out" / "report.html").read_text()


def test_values_from_files_are_html_escaped(tmp_path):
    make_run(tmp_path / "sweep", "<b>bold</b>", {"note": "<i>&x</i>", "$lr": 1e-3}, [1.0, 0.5])
    make_run(tmp_path / "sweep", "_hidden$", {}, [1.0, 0.7])
    out = tmp_path / "out"
    write_report(find_runs([str(tmp_path / "sweep")]), out)
    page = (out / "report.html").read_text()
    assert "<b>" not in page and "<i>" not in page
    assert "&lt;b&gt;bold&lt;/b&gt;" in page and "&lt;i&gt;&amp;x&lt;/i&gt;" in page
    assert '<td data-label="$lr">0.001</td>' in page


def test_bad_paths_give_one_line(tmp_path):
    (tmp_path / "empty" / "sub").mkdir(parents=True)
    with pytest.raises(ReportError) as err:
        find_runs([str(tmp_path / "empty")])
    assert str(err.value) == (f"report: {tmp_path / 'empty'}: "
                              "no progress.jsonl or metrics.json here or in its subdirectories")
    with pytest.raises(ReportError) as err:
        find_runs([str(tmp_path / "missing")])
    assert str(err.value) == (f"report: {tmp_path / 'missing'}: no such directory; expected a run directory "
                              "(with progress.jsonl or metrics.json) or a directory of runs")


def test_missing_matplotlib_is_one_line(sweep, tmp_path, monkeypatch):
    runs = find_runs([str(sweep)])
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(ReportError) as err:
        write_report(runs, tmp_path / "out")
    assert str(err.value) == "report: plots need matplotlib: pip install 'slurmgen[report]'"


def test_report_never_imports_torch(sweep, tmp_path):
    code = ("import sys\n"
            "from slurmgen.observe.report import find_runs, terminal_table\nfrom slurmgen.observe.report_html import write_report\n"
            f"runs = find_runs([{str(sweep)!r}])\n"
            "terminal_table(runs)\n"
            f"write_report(runs, {str(tmp_path / 'out')!r})\n"
            "print('heavy:', sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'transformers'}))\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                            cwd=Path(__file__).resolve().parent.parent)
    assert "heavy: []" in result.stdout, result.stderr


def test_same_run_names_in_two_sweeps_and_odd_characters(tmp_path):
    for sweep in ("a", "b"):
        make_run(tmp_path / sweep, "seed1", {"sweep": sweep}, [1.0, 0.5 if sweep == "a" else 0.4])
    make_run(tmp_path / "a", "odd\x1b[31mname", {}, [1.0, 0.9])
    runs = find_runs([str(tmp_path / "a"), str(tmp_path / "b")])
    assert [(r.name, r.swept.get("sweep")) for r in runs] == [("odd\x1b[31mname", None), ("seed1", "a"),
                                                              ("seed1", "b")]
    table = terminal_table(runs)
    assert "\x1b" not in table and "odd?[31mname" in table
    pixels = png_pixels(write_report(runs, tmp_path / "out")[1])
    assert pixels.std() > 0


def test_the_table_draws_each_runs_loss_curve(sweep):
    """A falling loss is a falling line of bars; a flat or missing one says so."""
    from slurmgen.observe.report import sparkline

    assert sparkline([4.0, 3.0, 2.0, 1.0]) == "\u2588\u2586\u2583\u2581"
    assert sparkline([2.0] * 50) == "\u2581" * 24
    assert sparkline([float("nan")]) == "-" and sparkline([]) == "-"
    assert len(sparkline([float(v) for v in range(1000)], width=10)) == 10
    lines = terminal_table(find_runs([str(sweep)])).splitlines()
    assert lines[1].endswith("loss curve")
    curve = lines[2].split()[-1]
    assert curve[0] == "\u2588" and curve[-1] == "\u2581", curve  # the best run's loss fell
