"""One way to refuse bad input, shared by every command: one line, exit status 2, no traceback."""

from __future__ import annotations

import sys

import click
import cloup

USAGE_ERROR = 2
INTERRUPTED = 130


def fail(message: str, status: int = USAGE_ERROR):
    click.echo(f"slurmgen: error: {message}", err=True)
    sys.exit(status)


class OneLineErrors:
    """Mixin for click commands and groups: click's usage errors become one line and exit 2."""

    def main(self, args=None, prog_name=None, **extra):
        extra.pop("standalone_mode", None)
        try:
            return super().main(args, prog_name, standalone_mode=False, **extra)
        except click.NoSuchOption as err:
            fail(_elsewhere(err) or err.format_message(), USAGE_ERROR)
        except click.exceptions.Abort:
            fail("aborted", INTERRUPTED)
        except click.ClickException as err:
            fail(err.format_message(), USAGE_ERROR)
        except click.exceptions.Exit as exit_:
            sys.exit(exit_.exit_code)


def _elsewhere(err: click.NoSuchOption) -> str:
    """For a job option another command has (submit's --spares): which ones, not click's guess."""
    from slurmgen.options import shown_by

    name = err.ctx.command.name if err.ctx else ""
    others = [c for c in shown_by(err.option_name) if c != name]
    if not others or name in shown_by(err.option_name):
        return ""
    where = ", ".join(others[:-1]) + " and " + others[-1] if len(others) > 1 else others[0]
    return f"{err.option_name} is not an option of {err.ctx.command_path}; slurmgen {where} take it"


class OneLineCommand(OneLineErrors, cloup.Command):
    """A command whose bad input is one line and exit status 2; its options in --help sections."""


class OneLineGroup(OneLineErrors, cloup.Group):
    """The `slurmgen` group; bad input is one line and exit status 2."""
