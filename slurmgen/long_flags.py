"""Short flags written as their long ones before click parses a command's arguments (issue 43)."""

from __future__ import annotations

import click


def long_flags(command: click.Command, args: list[str]) -> list[str]:
    """The arguments with each short flag written as its option's long one (-o FILE as --output FILE):
    the same options, but click tries a short flag as a long one first, and that miss builds an error
    with difflib's close matches among every option (~1% of a render, issue 43). A flag given last (no
    value: click's message names it as typed), values, and everything after `--` stay as they are."""
    takes = {}  # flag -> (its long form, how many values follow it)
    for param in command.params:
        if isinstance(param, click.Option):
            long = next((flag for flag in param.opts if flag.startswith("--")), None)
            values = 0 if param.is_flag or param.count else param.nargs
            for flag in param.opts:
                takes[flag] = (long or flag, values)
            for flag in param.secondary_opts:
                takes[flag] = (flag, 0)
    out, i = [], 0
    while i < len(args):
        arg = args[i]
        if arg == "--":  # the training arguments, as they are (below)
            break
        if arg not in takes:
            out.append(arg)
            i += 1
            continue
        long, values = takes[arg]
        given = args[i + 1:i + 1 + values]
        out += [long if len(given) == values else arg, *given]
        i += 1 + len(given)
    return out + args[i:]
