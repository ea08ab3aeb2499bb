"""A shipped entry point's training arguments parsed from its parser's option list, in milliseconds.

train.args_check writes the list (every option's names, value count and type, read from TRL's or
transformers' own parser) the first time it runs with a Python, TRL and transformers; a plain
`render` or `submit` then parses each command line against it with argparse, as that parser would:
an unknown option, a value that is no number, no boolean word or none of the choices is refused with
the parser's own words. What only the whole parser judges (its dataclasses' checks of combinations,
the files --config names) is `slurmgen check`'s (train.args_check itself)."""

from __future__ import annotations

import argparse


class Refused(Exception):
    """The parser's refusal of an argument list, its one line."""


class _Ended(Exception):
    """--help: the parser prints its help and ends the program there, accepting the line."""


class _End(argparse.Action):
    def __call__(self, parser, namespace, values, option_string=None):
        raise _Ended()


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse would print its usage text and exit
        raise Refused(message)


def first_refusal(listing: dict, lists: list[list[str]]) -> str:
    """The first argument list's refusal by the parser that `listing` describes, or ""."""
    for argv in lists:
        argv, config = list(argv), False
        if listing.get("config_file") and "--config" in argv:
            at = argv.index("--config")  # TRL reads the file (defaults, maybe the required ones) before parsing
            del argv[at:at + 2]
            config = True
        try:
            values, unused = _build(listing, required=not config).parse_known_args(argv)
        except Refused as refusal:
            return str(refusal)
        except _Ended:
            continue
        if unused:
            return (f"Some specified arguments are not used by the HfArgumentParser: {unused}"
                    if listing["unused"] == "hf" else f"unrecognized arguments: {' '.join(unused)}")
        for flags, refusal in [] if config else listing.get("needed", []):
            if not any(getattr(values, flag.lstrip("-").replace("-", "_"), None) for flag in flags):
                return refusal
    return ""


def _build(listing: dict, required: bool = True) -> _Parser:
    parser = _Parser(add_help=False, allow_abbrev=listing["abbrev"])
    for option in listing["options"]:
        if not option["flags"]:
            continue  # a positional: none of the shipped parsers has one
        if option["nargs"] == 0:  # a flag (--no_bf16): present or not; --help ends the parse
            parser.add_argument(*option["flags"], **({"action": _End, "nargs": 0} if option.get("ends")
                                                      else {"action": "store_true"}))
            continue
        settings = {"nargs": option["nargs"], "required": option["required"] and required, "type": _convert(option)}
        if option["kind"] == "choice":
            settings["choices"] = option["choices"]
        if option["nargs"] == "?" and option["const"]:
            settings["const"] = True
        parser.add_argument(*option["flags"], **settings)
    return parser


def _convert(option: dict):
    """The value check of one option: argparse words its refusal as the real parser's would
    ("invalid float value: 'abc'"), and a boolean's refusal is its parser's own text."""
    kind = option["kind"]
    if kind in ("int", "float"):
        number, nulls, nocase = {"int": int, "float": float}[kind], option.get("nulls", ()), option.get("nocase")

        def convert(value: str):
            return value if (value.lower() if nocase else value) in nulls else number(value)

        convert.__name__ = kind  # argparse names the type in its refusal: "invalid int value: 'x'"
        return convert
    if kind == "bool":
        words, nocase, refusal, probe = set(option["words"]), option["nocase"], option["refusal"], option["probe"]

        def boolean(value: str) -> str:
            if (value.lower() if nocase else value) in words:
                return value
            # the refusal of a probe value, with the value given put in its place
            raise argparse.ArgumentTypeError(refusal.replace(repr(probe), repr(value)).replace(probe, value))

        return boolean
    return str
