"""The job file: a job's options and its training arguments in one TOML file, to commit beside the
code (`slurmgen render -f job.toml`; check, fit and submit take it too). Its keys are the long
options' names (`nodes = 4`, `log-dir = "logs"`) and `args` for the training arguments after `--`;
`--show-config` writes one (slurmgen.settings_text). Every key is checked against the one
declaration of the options (slurmgen.options.ENTRIES, handed in): an unknown key, a wrong type or a
choice not offered is one line naming the key, its value and what is allowed. slurmgen.Job takes the
same names."""

from __future__ import annotations

from slurmgen.plan.option_fields import SUBMIT
from slurmgen.plan.profiles import toml_parser
from slurmgen.plan.words import SpecError

ARGS = "args"  # the training arguments: the key, and the Job keyword
TRAIN_ARGS = "train_args"  # the same, as click passes them
KINDS = {bool: "true or false", int: "a whole number", float: "a number", str: "a string",
         list: "a string or a list of strings"}


def toml_value(value) -> str:
    """A value as TOML writes it (strings as basic strings: one line, escapes where needed)."""
    import json

    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{toml_value(str(k))} = {toml_value(v)}" for k, v in value.items()) + "}"
    text = json.dumps(str(value), ensure_ascii=False)  # JSON's escapes are TOML's
    # DEL is no TOML text; a surrogate (undecodable command-line bytes) is shown escaped, and refused on reading
    return "".join(f"\\u{ord(c):04x}" if c == "\x7f" or "\ud800" <= c <= "\udfff" else c for c in text)


def _refuse(where: str, key: str, value, allowed: str) -> SpecError:
    return SpecError(f"{where}{key} = {toml_value(value)}: {allowed}")


def _unknown(entries, where: str, key: str, value) -> SpecError:
    import difflib  # a refusal's hint only

    names = [e.option.name.replace("_", "-") for e in entries] + [ARGS]
    close = difflib.get_close_matches(key.replace("_", "-"), names, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return _refuse(where, key, value, f"no such option; {hint}the keys are the long options of `slurmgen render"
                   f" --help` without their dashes, and {ARGS} for the training arguments")


def _strings(where: str, key: str, value, allowed: str) -> tuple:
    """A list of strings (numbers taken as their text); one string is a list of one."""
    items = value if isinstance(value, list) else [value]
    if any(isinstance(v, (bool, list, dict)) or not isinstance(v, (str, int, float)) for v in items):
        raise _refuse(where, key, value, f"give {allowed}")
    return tuple(str(v) for v in items)


def option_value(entries, key: str, value, where: str = ""):
    """(name, value as the command line gives it) for a key of a job file or a Job keyword;
    entries: the job options (slurmgen.options.ENTRIES)."""
    name = key.replace("-", "_")
    if name in (ARGS, TRAIN_ARGS):
        if not isinstance(value, (list, tuple)):
            raise _refuse(where, key, value, "give the training arguments as a list of strings, e.g."
                          ' ["--max_steps", "100"]')
        return TRAIN_ARGS, _strings(where, key, list(value), "the training arguments as a list of strings")
    entry = next((e for e in entries if e.option.name == name), None)
    if entry is None:
        raise _unknown(entries, where, key, value)
    if value is None:  # a Job keyword left unset (TOML has no null)
        return name, entry.default
    if isinstance(value, tuple):
        value = list(value)
    return name, _typed(entry, key, value, where)


def _typed(entry, key: str, value, where: str):
    kind, choices = entry.kind, entry.option.choices
    flag = entry.option.flags[0].split("/")[0]
    if name_is(entry, "gpus") and isinstance(value, list) and value and all(_whole(v) for v in value):
        return ",".join(map(str, value))  # gpus = [1, 1, 2, 2]
    if name_is(entry, "env") and isinstance(value, dict):
        value = [f"{k}={v}" for k, v in value.items()]  # env = {HF_HOME = "/shared/hf"}
    if kind is bool and isinstance(value, bool):
        return value
    if kind is int and _whole(value):
        return value
    if kind is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if kind is list:
        return _strings(where, key, value, f"{KINDS[list]} (as repeated {flag})")
    if kind is str and isinstance(value, (str, int, float)) and not isinstance(value, bool):
        if choices and str(value) not in choices:
            raise _refuse(where, key, value, f"give one of {', '.join(map(toml_value, choices))}")
        return str(value)
    extra = " (or a list of whole numbers, one per node)" if name_is(entry, "gpus") else ""
    raise _refuse(where, key, value, f"give {KINDS[kind]}{extra}, as {flag} takes")


def _whole(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def name_is(entry, name: str) -> bool:
    return entry.option.name == name


def values(entries, data: dict, where: str = "") -> dict:
    """Keys (or Job keywords) -> {option name: value as click gives it}, train_args included."""
    found = {}
    for key, value in data.items():
        name, converted = option_value(entries, key, value, where)
        if name in found:
            raise _refuse(where, key, value, "given twice (once with - and once with _)")
        found[name] = converted
    return found


def for_command(entries, found: dict, command: str, where: str) -> dict:
    """The values a command takes. Submit runs the job, so a key it cannot honour (a launcher, spares:
    a rendered script's) is refused unless it keeps its default; check and fit only read, and take
    what they show (fit: the layout and the memory)."""
    by_name = {e.option.name: e for e in entries}
    shown = {n for n, e in by_name.items() if command in e.option.commands} | {TRAIN_ARGS}
    for name, value in found.items():
        entry = by_name.get(name)
        if command == SUBMIT and name not in shown and value != entry.default:
            flag = entry.option.flags[0].split("/")[0]
            raise _refuse(where, name.replace("_", "-"), value, f"slurmgen submit does not take {flag} (a rendered"
                          " script's option: use slurmgen render, or leave the key out)")
    return {n: v for n, v in found.items() if n in shown}


def read(entries, path: str) -> dict:
    """A job file's values, checked (SpecError: one line naming the file, the key and the value)."""
    from pathlib import Path  # only for -f: render imports no pathlib otherwise (issue 43)

    try:
        text = Path(path).read_text()
    except OSError as err:
        raise SpecError(f"-f {path!r}: {err.strerror or err}") from None
    except (UnicodeDecodeError, ValueError):
        raise SpecError(f"-f {path!r}: not a text file (a job file is TOML)") from None
    tomllib = toml_parser()
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise SpecError(f"{path}: {err}") from None
    return values(entries, data, f"{path}: ")
