"""train.sft with prepared data: a prep-only run tokenizes and saves, training loads and never tokenizes."""

from __future__ import annotations

import math
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # train_fixtures, whatever the import mode
from train_fixtures import clean_env, hf_cache, read_metrics, sft_args, tiny  # noqa: F401

# What TRL's SFTTrainer shows (a datasets progress bar) while it tokenizes the train set; its
# other preparation steps (adding EOS, labels, truncating, packing) show "<step> train dataset:".
TOKENIZING = "Tokenizing train dataset"
ANY_PREP_STEP = " train dataset:"


@pytest.fixture
def fresh_text(tiny, tmp_path) -> str:
    """text.jsonl under a new path: datasets caches by path, and a cache hit from another
    test's run would tokenize silently (no progress text to look for)."""
    path = tmp_path / "text.jsonl"
    shutil.copy(tiny / "data" / "text.jsonl", path)
    return str(path)


def sft_argv(tiny, out, data_file, steps=4):
    argv = sft_args(tiny, out, steps, steps)
    argv[argv.index("--dataset_name") + 1] = data_file
    return argv


def prepare(argv, prepared, env, capsys):
    """A prep-only run in process; returns its stdout + stderr."""
    env.setenv("SLURMGEN_PREPARE_ONLY", "1")
    env.setenv("SLURMGEN_PREPARED_DATA", str(prepared))
    from train import sft

    capsys.readouterr()
    assert sft.main(argv) is None
    env.delenv("SLURMGEN_PREPARE_ONLY")
    out = capsys.readouterr()
    return out.out + out.err


@pytest.mark.timeout(120)
def test_prepare_only_saves_tokenized_data(tiny, tmp_path, fresh_text, clean_env, capsys):
    import datasets

    prepared = tmp_path / "prepared"
    output = prepare(sft_argv(tiny, tmp_path / "run", fresh_text), prepared, clean_env, capsys)
    assert TOKENIZING in output
    assert f"slurmgen-train: prepared data saved to {prepared} (1000 rows)\n" in output
    train = datasets.load_from_disk(str(prepared / "train"))
    assert len(train) == 1000 and "input_ids" in train.column_names
    assert all(isinstance(i, int) for i in train[0]["input_ids"]) and len(train[0]["input_ids"]) > 1
    assert sorted(p.name for p in prepared.iterdir()) == ["train"]  # no eval set, no temporary dirs
    run = tmp_path / "run"  # the Trainer makes output_dir; nothing may be trained into it
    assert not run.exists() or not any(run.iterdir())


@pytest.mark.timeout(180)
def test_training_on_prepared_data_does_not_tokenize(tiny, tmp_path, fresh_text, clean_env, capsys):
    from train import sft

    prepared, out = tmp_path / "prepared", tmp_path / "run"
    assert TOKENIZING in prepare(sft_argv(tiny, out, fresh_text), prepared, clean_env, capsys)

    # Another copy of the file: were it tokenized here, no cache hit would hide the progress text.
    uncached = shutil.copy(fresh_text, tmp_path / "uncached.jsonl")
    metrics = sft.main(sft_argv(tiny, out, str(uncached)))  # SLURMGEN_PREPARED_DATA still set
    captured = capsys.readouterr()
    output = captured.out + captured.err
    assert f"slurmgen-train: using the data prepared in {prepared} (no tokenization here)\n" in captured.out
    assert TOKENIZING not in output
    assert ANY_PREP_STEP not in output  # no preparation at all (skip_prepare_dataset)
    assert metrics["global_step"] == 4 and metrics == read_metrics(out)
    assert math.isfinite(metrics["last_loss"]) and math.isfinite(metrics["train_loss"])


@pytest.mark.timeout(120)
def test_missing_prepared_data_is_one_line_error(tiny, tmp_path, clean_env, capsys):
    from train import sft

    prepared = tmp_path / "prepared"
    clean_env.setenv("SLURMGEN_PREPARED_DATA", str(prepared))
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        sft.main(sft_args(tiny, tmp_path / "run", 4, 4))
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (f"error: SLURMGEN_PREPARED_DATA={prepared} has no train/: "
                       "the data prep job (SLURMGEN_PREPARE_ONLY=1) has not written it")


def test_save_atomically_replaces_whole_or_not_at_all(tmp_path):
    """A rerun replaces the data set; a failed write leaves the old one and no temporary dir."""
    import datasets

    from train import data

    dest = tmp_path / "prepared" / "train"
    data.save_atomically(datasets.Dataset.from_dict({"input_ids": [[1, 2]]}), dest)
    data.save_atomically(datasets.Dataset.from_dict({"input_ids": [[3], [4]]}), dest)
    assert datasets.load_from_disk(str(dest))["input_ids"] == [[3], [4]]

    class Failing:
        def save_to_disk(self, path):
            Path(path).mkdir()
            Path(path, "half-written").write_text("x")
            raise OSError("disk full")

    with pytest.raises(OSError):
        data.save_atomically(Failing(), dest)
    assert datasets.load_from_disk(str(dest))["input_ids"] == [[3], [4]]
    assert sorted(p.name for p in dest.parent.iterdir()) == ["train"]
