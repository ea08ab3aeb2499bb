"""A job's effective settings written out two ways: as a job file (`--show-config`, read back by
`-f`: slurmgen.job_file) and as the command line that renders the same script (the script's
`# Command:` line). Both are written from the values, not from what was typed, so that a command
line, a job file, a profile and a slurmgen.Job with the same values give the same script. The job
options (slurmgen.options.ENTRIES) are handed in."""

from __future__ import annotations

from slurmgen.job_file import ARGS, TRAIN_ARGS, toml_value
from slurmgen.plan.option_fields import RENDER

HEADER = ("# slurmgen job file: slurmgen render -f FILE (check, fit and submit take it too); options given\n"
          "# on the command line win. A commented line shows a default. Written by --show-config.")


def _given(entry, params: dict):
    value = params.get(entry.option.name, entry.default)
    return list(value) if isinstance(value, tuple) else value


def _differs(entry, params: dict) -> bool:
    default = entry.default
    return _given(entry, params) != (list(default) if isinstance(default, tuple) else default)


def job_file(entries, params: dict, sources: dict) -> str:
    """The TOML job file of these values, each line with its source; a default (or unset) one is a
    comment, so that the file pins only what was chosen. sources: option name -> where it came from."""
    lines = [HEADER]
    for entry in (e for e in entries if RENDER in e.option.commands and e.option.name in params):
        name, value = entry.option.name, _given(entry, params)
        source = sources.get(name, "default")
        key = name.replace("_", "-")
        text = f"{key} = {toml_value(value)}" if value is not None else f"{key} = (unset)"
        if source == "default" or value is None:
            text = "# " + text
        lines.append(f"{text:<40} # {source}")
    args = list(params.get(TRAIN_ARGS, ()))
    text = f"{ARGS} = {toml_value(args)}"
    lines.append(f"{text if args else '# ' + text:<40} # {sources.get(TRAIN_ARGS, 'default')}")
    return "\n".join(lines)


def _words(entry, value) -> list:
    flag = entry.option.flags[0]
    if entry.kind is bool:
        on, _, off = flag.partition("/")
        return [on if value else off]
    if entry.kind is list:
        return [w for item in value for w in _pair(flag, item)]
    if entry.option.name == "gpus":
        from slurmgen.plan.words import compact_gpus

        value = compact_gpus(value)
    return _pair(flag, str(value))


def _pair(flag: str, value: str) -> list:
    """`--flag value`, or `--flag=value` for a value that click would take for an option."""
    return [f"{flag}={value}"] if value.startswith("-") else [flag, value]


def command_line(entries, params: dict, output: str = "-") -> str:
    """`slurmgen render` with every job option that is not its default, in --help's order, then the
    training arguments; `-o OUTPUT` unless the script went to stdout."""
    from slurmgen.script.render import command_word  # jinja2: only where a script is written

    words = ["slurmgen", "render", *(["-o", output] if output != "-" else [])]
    for entry in entries:
        if RENDER in entry.option.commands and _differs(entry, params):
            words += _words(entry, _given(entry, params))
    args = list(params.get(TRAIN_ARGS, ()))
    if args:
        words += ["--", *args]
    return " ".join(command_word(word) for word in words)
