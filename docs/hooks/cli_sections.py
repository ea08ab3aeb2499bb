"""mkdocs hook: the CLI reference keeps each command's --help sections (Layout, Resources, ...).

mkdocs-click prints a command's options with click's own formatter, which knows nothing of the
sections (slurmgen.help_sections), so every option lands in one block. For a command with sections
this prints them as `--help` does, one titled block per section; other commands keep mkdocs-click's
output.
Offline and build-time only: the page is still generated from the click commands."""

from __future__ import annotations

import re

from mkdocs_click import _docs

from slurmgen.help_sections import SectionedCommand, params_help

_plain_options = _docs._make_options


def _sectioned_options(ctx, style="plain", show_hidden=False):
    """The option sections of ctx.command as `--help` prints them: a bold title, then a text block."""
    if style != "plain" or not isinstance(ctx.command, SectionedCommand):
        yield from _plain_options(ctx, style, show_hidden=show_hidden)
        return
    sections = re.split(r"^(\S[^\n]*):\n", params_help(ctx.command, ctx), flags=re.M)[1:]  # title, body, ...
    for title, body in zip(sections[::2], sections[1::2]):
        yield f"**{title}:**"
        yield ""
        yield "```text"
        yield from body.rstrip("\n").splitlines()
        yield "```"
        yield ""


def on_config(config):
    _docs._make_options = _sectioned_options  # mkdocs-click looks it up at each command
    return config
