"""`slurmgen fit` against what training really holds (issue 42, item 7): bench/fit_vs_measured.py's
quick set, on a 13 M Llama (hidden 512, 4 layers, grouped-query attention) with two ranks where
the strategy needs them: one rank without DDP, DDP, eager attention, gradient checkpointing, LoRA
on every linear layer, FSDP full shard under bf16 mixed precision (fp32 master weights), FSDP +
LoRA and FSDP with CPU offload. Every component of every run within 15% of what was measured
(the bench's own figures: the whole set, tiny and 112 M models, is in docs/pages/guides/fit-checks.md)."""
import importlib.util
import sys
from pathlib import Path

import pytest

from tests.conftest import need

sys.path.insert(0, str(Path(__file__).resolve().parent))  # train_fixtures, whatever the import mode
from train_fixtures import tiny  # noqa: E402,F401

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parent.parent


def bench():
    spec = importlib.util.spec_from_file_location("fit_vs_measured", REPO / "bench" / "fit_vs_measured.py")
    module = sys.modules["fit_vs_measured"] = importlib.util.module_from_spec(spec)  # its dataclasses look it up
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def results(tiny, tmp_path_factory):
    need("trl")
    work = tmp_path_factory.mktemp("fit-measured")
    (work / "tiny").symlink_to(tiny)  # the session's tiny assets: build() makes the same (train.tiny, seed 0)
    lines = []
    found = bench().run(["mini"], quick=True, work=work, say=lines.append)
    print("\n".join(lines))
    return found


def test_the_quick_set_covers_every_strategy_that_runs_on_a_cpu(results):
    names = " | ".join(r["case"] for r in results)
    for kind in ("1 rank, fp32", "DDP", "checkpointing", "eager", "LoRA all-linear", "FSDP, bf16 mixed precision",
                 "FSDP + LoRA", "FSDP + CPU offload"):
        assert kind in names


def test_every_component_within_15_percent_of_what_was_measured(results):
    off = [f"{r['case']}: {key} measured {m:.0f} B, fit {f:.0f} B ({ratio:.2f})"
           for r in results for key, m, f, ratio in r["rows"] if abs(ratio - 1) > 0.15]
    assert off == []
