"""Issue 43 item 1: a plain render parses a shipped entry point's training arguments against the option
list its own parser left (slurmgen/site/train_options.py). Here that list is read from train.ddp_loop's
parser and both judge the same 2,000 generated command lines: the same verdict, in the same words."""
import json
import random

import pytest

pytestmark = pytest.mark.unit

WORDS = ["--lr", "--max_steps", "--fsdp", "--use_cpu", "--ddp_find_unused_parameters", "--model_name_or_path",
         "--dataset", "--output_dir", "--batch_size", "--seed", "--max", "--lr=", "--lr=x", "--seed=3", "--", "-",
         "", "abc", "1e-3", "-5", "7", "99999999999999999999999", "true", "FALSE", "maybe", "\x00", "é名",
         "\udcff", "--max_stepz", "-h", "--bogus=1", "=", "--=", "---x", "m", "d", "o", "\n", " --lr"]


class Refused(Exception):
    pass


def real_verdict(argv: list[str]) -> str:
    from train.ddp_loop import arg_parser

    parser = arg_parser()

    def error(message):
        raise Refused(message)

    parser.error = error
    try:
        parser.parse_args(argv)
    except Refused as refusal:
        return str(refusal)
    except SystemExit:  # --help: the parser ends the program, accepting
        return ""
    return ""


def test_the_option_list_judges_as_the_parser_itself():
    from train.args_check import options

    from slurmgen.site.train_options import first_refusal

    listing = json.loads(json.dumps(options("train.ddp_loop")))  # as it is kept: through JSON
    rng, refused = random.Random(43), 0
    for _ in range(2000):
        argv = [rng.choice(WORDS) for _ in range(rng.randint(0, 9))]
        if rng.random() < 0.5:  # half with what the parser requires, so that more of the rest is judged
            argv = ["--model_name_or_path", "m", "--dataset", "d", "--output_dir", "o", *argv]
        expected = real_verdict(argv)
        assert first_refusal(listing, [argv]) == expected, argv
        refused += bool(expected)
    assert 500 < refused < 1900  # both verdicts were met often


SFT_WORDS = ["--learning_rate", "--learning-rate", "--bf16", "--no_bf16", "--lr_scheduler_type", "cosine", "cosin",
             "--max_steps", "--optim", "adamw_torch", "--report_to", "none", "--gradient_checkpointing",
             "--eval_strategy", "steps", "no", "--packing", "--use_peft", "--lora_target_modules", "q_proj",
             "--fsdp", "full_shard", "--fsdp_config", "{}", "--max_length", "--learn", "--model_name_or_path", "m",
             "--dataset_name", "d", "--max_stepz", "-h", "", "abc", "3e-4", "-1", "yes", "TRUE", "None", "null",
             "\x00", "é名"]


def test_trls_option_list_judges_as_trls_parser():
    """The same with train.sft's parser (TRL's, through transformers' HfArgumentParser): what its argparse
    part refuses, and the words it leaves unused, for 2,000 lines. Its dataclasses' own checks after
    parsing (bf16 on this machine, combinations) are check's; needs beyond the parser have their test."""
    from conftest import need

    need("trl")
    from train.args_check import options
    from train.sft import arg_parser

    from slurmgen.site.train_options import first_refusal

    listing = {**json.loads(json.dumps(options("train.sft"))), "needed": []}
    parser = arg_parser()

    def error(message):
        raise Refused(message)

    parser.error = error
    rng, refused = random.Random(1), 0
    for _ in range(2000):
        argv = [rng.choice(SFT_WORDS) for _ in range(rng.randint(0, 8))]
        try:
            _, unused = parser.parse_known_args(argv)
            expected = f"Some specified arguments are not used by the HfArgumentParser: {unused}" if unused else ""
        except Refused as refusal:
            expected = str(refusal)
        except SystemExit:
            expected = ""
        assert first_refusal(listing, [argv]) == expected, argv
        refused += bool(expected)
    assert 500 < refused < 1900


def test_a_boolean_refusal_is_the_parsers_own_words():
    from slurmgen.site.train_options import first_refusal

    listing = {"options": [{"flags": ["--bf16"], "nargs": "?", "required": False, "const": True, "kind": "bool",
                            "words": ["yes", "no"], "nocase": True, "probe": "slurmgen-probe",
                            "refusal": "Truthy value expected: got slurmgen-probe, not 'slurmgen-probe'"}],
               "abbrev": True, "unused": "hf", "needed": [[["--bf16"], "--bf16 is required"]]}
    assert first_refusal(listing, [["--bf16", "YES"]]) == ""
    assert first_refusal(listing, [["--bf16", "x y"]]) == "argument --bf16: Truthy value expected: got x y, not 'x y'"
    assert first_refusal(listing, [[]]) == "--bf16 is required"
    assert first_refusal(listing, [["--bf16", "no"], ["--b", "yes", "--cc"]]) == (
        "Some specified arguments are not used by the HfArgumentParser: ['--cc']")
