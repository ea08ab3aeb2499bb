"""The command line of the entry points: its errors and the options that were renamed.

Every mistake in the command line or the inputs is a UsageError, reported as one ``error: ...``
line with exit status 2 (cli_errors), never as a traceback or argparse's whole usage text. Old
transformers/TRL option names are caught before parsing, so users get the new name.

A leaf: imports only train.distenv (whose DistEnvError is a usage error too), so every other
module can raise UsageError without an import cycle.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Iterable, Iterator, Mapping

from train.distenv import DistEnvError


class UsageError(Exception):
    """A mistake in the command line or inputs: reported as one line, exit status 2."""


@contextlib.contextmanager
def cli_errors() -> Iterator[None]:
    """Turn UsageError (and argument-parser ValueErrors, an impossible launch environment) into
    `error: ...` and exit 2."""
    try:
        yield
    except (UsageError, DistEnvError) as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(2) from None


def one_line_parser_errors(parser) -> None:
    """argparse prints its whole usage text on a bad argument; report the one line instead."""

    def error(message: str):
        raise UsageError(message)

    parser.error = error


# Arguments from older transformers/TRL releases (as in the seed scripts) mapped to what
# replaced them. Checked before parsing so users get the new name, not a parser trace.
RENAMED_ARGS = {
    "tokenizer": "the tokenizer is loaded from --model_name_or_path and given to the trainer "
    "as processing_class (TRL renamed tokenizer= to processing_class=)",
    "max_seq_length": "use --max_length (TRL renamed max_seq_length to max_length)",
    "no_cuda": "use --use_cpu (transformers renamed no_cuda to use_cpu)",
    "evaluation_strategy": "use --eval_strategy (transformers renamed evaluation_strategy to eval_strategy)",
}
TEXT_FIELD_MOVED = "use --text_column (dataset_text_field is an SFTConfig option of train.sft)"


def boolean(value: str) -> bool:
    """true or false, as the Hugging Face arguments take them (yes/no and 1/0 too)."""
    import argparse

    word = value.lower()
    if word in ("true", "yes", "1"):
        return True
    if word in ("false", "no", "0"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {value!r}")


def check_needed(needed, given: Mapping[str, object]) -> None:
    """Each (options, refusal) of needed: one of the options has a value in given, or UsageError."""
    for flags, refusal in needed:
        if not any(given.get(flag) for flag in flags):
            raise UsageError(refusal)


def reject_old_args(argv: Iterable[str], renamed: Mapping[str, str], where: str = "") -> None:
    for token in argv:
        if not token.startswith("--"):
            continue
        name = token[2:].split("=", 1)[0].replace("-", "_")
        if name in renamed:
            raise UsageError(f"--{name} is no longer an option{where}: {renamed[name]}")


def reject_old_config_keys(argv: list[str], renamed: Mapping[str, str]) -> None:
    """Same check for the keys of a TrlParser ``--config recipe.yaml``."""
    if "--config" not in argv:
        return
    idx = argv.index("--config")
    if idx + 1 >= len(argv):
        raise UsageError("--config needs a file name")
    path = argv[idx + 1]
    if not os.path.isfile(path):
        raise UsageError(f"config file not found: {path}")
    import yaml

    with open(path) as fh:
        data = yaml.safe_load(fh) or {}
    if not isinstance(data, dict):
        raise UsageError(f"config file {path} must hold a YAML mapping")
    reject_old_args([f"--{k}" for k in data], renamed, where=f" (in {path})")
