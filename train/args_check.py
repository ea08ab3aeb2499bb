"""Parse a job's training arguments with the entry point's own parser, before the queue wait.

    python -m train.args_check MODULE ARGS_JSON [OPTIONS_OUT]   # a JSON list of argument lists, one per run

`slurmgen check` and `slurmgen render --check` run this on the login node for the entry points
slurmgen ships (train.sft, train.classify, train.ddp_loop): an unknown argument, a value of the wrong
type or a missing model is one `error: ...` line and exit 2 here, a finding that fails the check there,
not a failure on every rank after the wait. Exit 0 when every list parses. What only the job's nodes can judge (bf16 or fp16 on a login
node without that GPU) is left to the job; paths are the job's too (checked by the entry point).

OPTIONS_OUT: the parser's option list is written there too (JSON, options()), from which a plain
`slurmgen render` or `submit` parses later command lines in milliseconds (slurmgen/site/train_options.py),
where this program takes seconds for TRL's import.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import sys

from train.cli import UsageError
from train.distenv import DistEnvError

# Words of the parsers' refusals that depend on this machine's devices, not on the arguments.
DEVICE_WORDS = re.compile(r"bf16|fp16|tf32|gpu|cuda|npu|xpu|mps|hpu|device", re.I)


def first_error(module: str, lists: list[list[str]]) -> str | None:
    """The first refusal of MODULE's parser over the argument lists, or None."""
    check_args = importlib.import_module(module).check_args
    for argv in lists:
        try:
            check_args(list(argv))
        except (UsageError, DistEnvError) as exc:
            if not DEVICE_WORDS.search(str(exc)):
                return str(exc)
        except SystemExit as exc:  # a parser that exits on its own (--help among the arguments)
            if exc.code:
                return f"the arguments {' '.join(argv)!r} end the parser (exit status {exc.code})"
    return None


# A value no type function accepts: its refusal, with the value in it, is the template of every refusal.
PROBE = "slurmgen-probe"
BOOL_WORDS = ("yes", "no", "true", "false", "t", "f", "y", "n", "1", "0", "on", "off", "none", "null")


def _kind(action) -> dict:
    """How an option's value is judged: int or float (or a word for None, where transformers takes one),
    one of choices, a boolean word (with its parser's own refusal), or any text (a type slurmgen
    cannot judge without the library: dict, json; check's full parse judges those)."""
    if action.choices is not None:
        return {"kind": "choice", "choices": [str(getattr(c, "value", c)) for c in action.choices]}
    convert = action.type
    if getattr(convert, "__name__", "") in ("int", "float"):  # int itself, or transformers' wrapper of it
        return {"kind": convert.__name__, "nulls": [w for w in ("none", "null") if _accepts(convert, w)],
                "nocase": _accepts(convert, "NoNe")}
    if callable(convert) and getattr(convert, "__name__", "") in ("string_to_bool", "boolean"):
        try:
            convert(PROBE)
        except Exception as exc:  # argparse shows an ArgumentTypeError's text as it is
            return {"kind": "bool", "words": [w for w in BOOL_WORDS if _accepts(convert, w)],
                    "nocase": _accepts(convert, "TRUE"), "refusal": str(exc), "probe": PROBE}
    return {"kind": "str"}


def _accepts(convert, word: str) -> bool:
    try:
        convert(word)
    except Exception:
        return False
    return True


def options(module: str) -> dict:
    """MODULE's parser as data: each option's names, how many values it takes and what they may be.
    unused: how its parser refuses words it does not know (argparse's or the HfArgumentParser's);
    needed: what the entry point requires beyond its parser (one of these options, or this refusal)."""
    entry = importlib.import_module(module)
    parser = entry.arg_parser()
    found = [{"flags": list(action.option_strings), "nargs": action.nargs, "required": bool(action.required),
              "const": action.const is not None, "ends": isinstance(action, argparse._HelpAction), **_kind(action)}
             for action in parser._actions]  # argparse has no public list of its options (ends: --help)
    hf = hasattr(parser, "parse_args_into_dataclasses")
    return {"module": module, "options": found, "abbrev": parser.allow_abbrev, "unused": "hf" if hf else "argparse",
            "config_file": hasattr(parser, "parse_args_and_config"),  # TRL: --config FILE is read before parsing
            "needed": [[list(flags), refusal] for flags, refusal in getattr(entry, "NEEDED", ())]}


def keep(listing: str, path: str) -> None:
    """Write the option list whole or not at all (renders read it at any time, two may write it)."""
    part = f"{path}.{os.getpid()}.part"
    try:
        with open(part, "w") as out:
            out.write(listing)
        os.replace(part, path)
    except OSError:
        pass  # no list kept: the next render runs the parser again


def main(argv: list[str]) -> int:
    if len(argv) > 2:
        keep(json.dumps(options(argv[0])), argv[2])
    error = first_error(argv[0], json.loads(argv[1]))
    if error:
        print(f"error: {error}", flush=True)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
