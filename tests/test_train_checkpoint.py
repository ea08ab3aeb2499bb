"""train.checkpoint: only complete checkpoints are ever picked for resume."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from train import checkpoint  # noqa: E402


def make(root: Path, step: int, complete: bool) -> Path:
    path = root / f"checkpoint-{step}"
    path.mkdir(parents=True)
    (path / "model.safetensors").write_bytes(b"x" * 10)
    if complete:
        checkpoint.mark_complete(path, step)
    return path


def test_latest_complete_skips_incomplete_and_sorts_numerically(tmp_path):
    make(tmp_path, 5, True)
    make(tmp_path, 40, True)
    make(tmp_path, 100, False)  # killed while saving
    (tmp_path / "checkpoint-x").mkdir()  # not a checkpoint name
    (tmp_path / "checkpoint-200").write_text("a file, not a dir")
    assert checkpoint.latest_complete(tmp_path) == (40, tmp_path / "checkpoint-40")


def test_nothing_to_resume(tmp_path):
    assert checkpoint.latest_complete(tmp_path / "missing") is None
    make(tmp_path, 3, False)
    assert checkpoint.latest_complete(tmp_path) is None


def test_set_aside_incomplete(tmp_path):
    make(tmp_path, 5, True)
    make(tmp_path, 10, False)
    (tmp_path / "incomplete-checkpoint-10").mkdir()  # from an earlier failure: replaced
    moved = checkpoint.set_aside_incomplete(tmp_path)
    assert moved == [tmp_path / "incomplete-checkpoint-10"]
    assert (tmp_path / "incomplete-checkpoint-10" / "model.safetensors").exists()
    assert [s for s, _ in checkpoint.list_checkpoints(tmp_path)] == [5]


def test_staged_checkpoint_appears_complete_or_not_at_all(tmp_path):
    with checkpoint.staged_checkpoint(tmp_path, 7) as staging:
        (staging / "weights").write_text("w")
        assert not (tmp_path / "checkpoint-7").exists()
    assert checkpoint.is_complete(tmp_path / "checkpoint-7")
    assert (tmp_path / "checkpoint-7" / "weights").read_text() == "w"

    with pytest.raises(RuntimeError):
        with checkpoint.staged_checkpoint(tmp_path, 8) as staging:
            (staging / "weights").write_text("half")
            raise RuntimeError("killed while writing")
    assert not (tmp_path / "checkpoint-8").exists()
    assert checkpoint.latest_complete(tmp_path)[0] == 7


def test_staged_checkpoint_replaces_same_step(tmp_path):
    make(tmp_path, 4, False)
    with checkpoint.staged_checkpoint(tmp_path, 4) as staging:
        (staging / "weights").write_text("new")
    assert not (tmp_path / "checkpoint-4" / "model.safetensors").exists()
    assert checkpoint.is_complete(tmp_path / "checkpoint-4")


def test_prune_keeps_newest_complete(tmp_path):
    for s in (1, 2, 3):
        make(tmp_path, s, True)
    make(tmp_path, 4, False)
    checkpoint.prune(tmp_path, 2)
    assert [s for s, _ in checkpoint.list_checkpoints(tmp_path)] == [2, 3, 4]
    checkpoint.prune(tmp_path, None)
    assert len(checkpoint.list_checkpoints(tmp_path)) == 3


def test_write_json_atomic_leaves_no_temp(tmp_path):
    checkpoint.write_json_atomic(tmp_path / "metrics.json", {"a": 1})
    checkpoint.write_json_atomic(tmp_path / "metrics.json", {"a": 2})
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.json"]
    assert '"a": 2' in (tmp_path / "metrics.json").read_text()
