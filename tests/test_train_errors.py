"""Bad inputs: one line `error: ...` on stderr, exit status 2, before any heavy work."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # train_fixtures, whatever the import mode
from train_fixtures import (REPO, ARGS, clean_env, entry, hf_cache, subprocess_env, tiny)  # noqa: F401

NO_MODEL = "/nonexistent/model"


def run_in_process(module, argv, capsys):
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        entry(module)(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err, "nothing on stderr"
    return err[-1]


def with_model(module, tiny, out, model):
    argv = ARGS[module](tiny, out)
    argv[argv.index("--model_name_or_path") + 1] = model
    return argv


@pytest.mark.timeout(120)
@pytest.mark.parametrize("module", ["train.sft", "train.classify", "train.ddp_loop"])
def test_missing_model_path(module, tiny, tmp_path, clean_env, capsys):
    line = run_in_process(module, with_model(module, tiny, tmp_path / "run", NO_MODEL), capsys)
    assert line == f"error: model path not found: {NO_MODEL}"


@pytest.mark.timeout(120)
def test_model_dir_without_config(tiny, tmp_path, clean_env, capsys):
    (tmp_path / "empty").mkdir()
    line = run_in_process("train.ddp_loop", with_model("train.ddp_loop", tiny, tmp_path / "run",
                                                        str(tmp_path / "empty")), capsys)
    assert line == f"error: model path has no config.json: {tmp_path / 'empty'}"


@pytest.fixture
def body_only(tmp_path):
    path = tmp_path / "body.jsonl"
    path.write_text("".join(json.dumps({"body": f"row {i}", "stars": i % 2}) + "\n" for i in range(20)))
    return path


@pytest.mark.timeout(120)
def test_sft_data_without_text_column(tiny, tmp_path, body_only, clean_env, capsys):
    argv = ARGS["train.sft"](tiny, tmp_path / "run")
    argv[argv.index("--dataset_name") + 1] = str(body_only)
    line = run_in_process("train.sft", argv, capsys)
    assert line == f"error: data set {body_only} has no column 'text' or 'messages' (columns present: body, stars)"


@pytest.mark.timeout(120)
def test_sft_named_text_field_missing(tiny, tmp_path, body_only, clean_env, capsys):
    argv = ARGS["train.sft"](tiny, tmp_path / "run") + ["--dataset_text_field", "content"]
    argv[argv.index("--dataset_name") + 1] = str(body_only)
    line = run_in_process("train.sft", argv, capsys)
    assert line == f"error: data set {body_only} has no column 'content' or 'messages' (columns present: body, stars)"


@pytest.mark.timeout(120)
def test_classify_data_without_label(tiny, tmp_path, clean_env, capsys):
    text_only = tiny / "data" / "text.jsonl"
    argv = ARGS["train.classify"](tiny, tmp_path / "run")
    argv[argv.index("--train_file") + 1] = str(text_only)
    line = run_in_process("train.classify", argv, capsys)
    assert line == f"error: data set {text_only} has no column 'label' (columns present: text)"


@pytest.mark.timeout(120)
def test_ddp_loop_data_without_text(tiny, tmp_path, body_only, clean_env, capsys):
    argv = ARGS["train.ddp_loop"](tiny, tmp_path / "run")
    argv[argv.index("--dataset") + 1] = str(body_only)
    line = run_in_process("train.ddp_loop", argv, capsys)
    assert line == f"error: data set {body_only} has no column 'text' (columns present: body, stars)"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("module", ["train.sft", "train.ddp_loop"])
def test_missing_data_file(module, tiny, tmp_path, clean_env, capsys):
    argv = ARGS[module](tiny, tmp_path / "run")
    flag = "--dataset_name" if module == "train.sft" else "--dataset"
    argv[argv.index(flag) + 1] = "/nonexistent/data.jsonl"
    line = run_in_process(module, argv, capsys)
    assert line == "error: dataset not found: /nonexistent/data.jsonl"


OLD_ARGS = [
    ("train.sft", ["--tokenizer", "x"],
     "error: --tokenizer is no longer an option: the tokenizer is loaded from --model_name_or_path and given "
     "to the trainer as processing_class (TRL renamed tokenizer= to processing_class=)"),
    ("train.sft", ["--max_seq_length", "128"],
     "error: --max_seq_length is no longer an option: use --max_length (TRL renamed max_seq_length to max_length)"),
    ("train.sft", ["--no_cuda"],
     "error: --no_cuda is no longer an option: use --use_cpu (transformers renamed no_cuda to use_cpu)"),
    ("train.sft", ["--evaluation_strategy=steps"],
     "error: --evaluation_strategy is no longer an option: use --eval_strategy "
     "(transformers renamed evaluation_strategy to eval_strategy)"),
    ("train.classify", ["--dataset_text_field", "text"],
     "error: --dataset_text_field is no longer an option: use --text_column "
     "(dataset_text_field is an SFTConfig option of train.sft)"),
    ("train.classify", ["--no_cuda"],
     "error: --no_cuda is no longer an option: use --use_cpu (transformers renamed no_cuda to use_cpu)"),
    ("train.classify", ["--max_seq_length", "64"], "error: --max_seq_length is no longer an option: use --max_length"),
    ("train.ddp_loop", ["--dataset_text_field", "text"],
     "error: --dataset_text_field is no longer an option: use --text_column "
     "(dataset_text_field is an SFTConfig option of train.sft)"),
    ("train.ddp_loop", ["--tokenizer", "x"],
     "error: --tokenizer is no longer an option: the tokenizer is loaded from --model_name_or_path and given "
     "to the trainer as processing_class (TRL renamed tokenizer= to processing_class=)"),
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("module, extra, message", OLD_ARGS)
def test_old_arguments_name_the_new_ones(module, extra, message, tiny, tmp_path, clean_env, capsys):
    line = run_in_process(module, ARGS[module](tiny, tmp_path / "run") + extra, capsys)
    assert line == message


@pytest.mark.timeout(60)
def test_old_key_in_recipe(tiny, tmp_path, clean_env, capsys):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("max_seq_length: 512\n")
    line = run_in_process("train.sft", ARGS["train.sft"](tiny, tmp_path / "run") + ["--config", str(recipe)], capsys)
    assert line == (f"error: --max_seq_length is no longer an option (in {recipe}): "
                    "use --max_length (TRL renamed max_seq_length to max_length)")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("flag", ["--load_in_4bit", "--load_in_8bit"])
def test_quantization_without_cuda(flag, tiny, tmp_path, clean_env, capsys):
    from train import devices

    if devices.cuda_available() and devices.bitsandbytes_available():
        pytest.skip("CUDA and bitsandbytes are present: quantized loading is allowed here")
    line = run_in_process("train.sft", ARGS["train.sft"](tiny, tmp_path / "run") + [flag, "--use_peft"], capsys)
    cuda = "yes" if devices.cuda_available() else "no"
    bnb = "yes" if devices.bitsandbytes_available() else "no"
    assert line == (f"error: {flag} needs CUDA and bitsandbytes (CUDA: {cuda}, bitsandbytes: {bnb}); "
                    "drop it to train without quantization")


@pytest.mark.timeout(60)
def test_unknown_argument_is_one_line(tiny, tmp_path, clean_env, capsys):
    line = run_in_process("train.sft", ARGS["train.sft"](tiny, tmp_path / "run") + ["--bogus_option", "1"], capsys)
    assert line.startswith("error: ") and "--bogus_option" in line


@pytest.mark.timeout(60)
def test_bad_collective_timeout(tiny, tmp_path, clean_env, capsys):
    clean_env.setenv("SLURMGEN_COLLECTIVE_TIMEOUT", "soon")
    line = run_in_process("train.ddp_loop", ARGS["train.ddp_loop"](tiny, tmp_path / "run"), capsys)
    assert line == "error: SLURMGEN_COLLECTIVE_TIMEOUT='soon' is not a number of seconds"


@pytest.mark.timeout(60)
def test_collective_timeout_reaches_trainer_arguments(clean_env):
    from train import hf
    from train.distenv import DistEnv

    clean_env.setenv("SLURMGEN_COLLECTIVE_TIMEOUT", "42")
    assert hf.capability_defaults(DistEnv())["ddp_timeout"] == 42
    clean_env.delenv("SLURMGEN_COLLECTIVE_TIMEOUT")
    assert hf.capability_defaults(DistEnv())["ddp_timeout"] == 600


@pytest.mark.timeout(60)
def test_command_line_error_is_fast_and_has_no_traceback(tiny, tmp_path, hf_cache):
    """From the shell: exit 2, the one line on stderr, no Python traceback, no model loaded."""
    argv = ARGS["train.sft"](tiny, tmp_path / "run") + ["--max_seq_length", "128"]
    result = subprocess.run([sys.executable, "-m", "train.sft", *argv], cwd=REPO, env=subprocess_env(hf_cache),
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip() == ("error: --max_seq_length is no longer an option: use --max_length "
                                     "(TRL renamed max_seq_length to max_length)")
    assert "Traceback" not in result.stdout + result.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.timeout(60)
def test_hub_dataset_offline(tiny, tmp_path, clean_env, capsys):
    argv = ARGS["train.ddp_loop"](tiny, tmp_path / "run")
    argv[argv.index("--dataset") + 1] = "imdb"
    line = run_in_process("train.ddp_loop", argv, capsys)
    assert line.startswith("error: dataset not found: imdb (")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("module, argv, message", [
    ("train.ddp_loop", ["--dataset", "x"],
     "error: the following arguments are required: --model_name_or_path, --output_dir"),
    ("train.sft", ["--max_steps", "abc"], "error: argument --max_steps/--max-steps: invalid int value: 'abc'"),
    ("train.classify", ["--bogus", "1"],
     "error: Some specified arguments are not used by the HfArgumentParser: ['--bogus', '1']"),
])
def test_parser_errors_are_one_line(module, argv, message, clean_env, capsys):
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        entry(module)(argv)
    assert exc.value.code == 2
    assert capsys.readouterr().err.strip() == message
