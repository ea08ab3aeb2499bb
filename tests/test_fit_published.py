"""`slurmgen fit` against published runs (issue 42, item 7): the ZeRO paper's bytes per parameter,
the QLoRA paper's 65B on one 48 GB GPU, PEFT's FSDP and DeepSpeed recipes for Llama-2-70b (LoRA
and QLoRA, with and without CPU offload), and the Hugging Face blog's FSDP runs (host memory of a
70B read in every rank, a 7B full fine-tune on 2 GPUs). Each published figure is a literal in
bench/fit_published.py with its source, its tolerance and why; docs/pages/guides/fit-checks.md
shows the same table."""
import importlib.util
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("fit_published", REPO / "bench" / "fit_published.py")
published = sys.modules["fit_published"] = importlib.util.module_from_spec(_spec)  # its dataclasses look it up
_spec.loader.exec_module(published)


def test_at_least_six_published_runs_each_with_its_source():
    assert len(published.CASES) >= 6
    assert all(case.url.startswith("https://") and case.claim for case in published.CASES)


@pytest.mark.parametrize("case", published.CASES, ids=[c.source for c in published.CASES])
def test_fit_agrees_with_the_published_run(case):
    value = published.figure(case)
    assert published.within(case, value), (
        f"{case.source}: published {case.published:g}, fit {value:.2f} (tolerance {case.tolerance:.0%})")


def test_the_docs_table_is_the_benchs():
    """Every row the bench prints is in the docs page, with fit's figure as it is now."""
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        published.main()
    page = (REPO / "docs" / "pages" / "guides" / "fit-checks.md").read_text()
    rows = [line for line in out.getvalue().splitlines() if line.startswith("| [")]
    assert rows and [row for row in rows if row not in page] == []
