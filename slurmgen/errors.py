"""One way to refuse bad input, shared by every command: one line, exit status 2, no traceback."""

from __future__ import annotations

import sys

import click

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
            fail(self.unknown_option(err) or err.format_message(), USAGE_ERROR)
        except click.exceptions.Abort:
            fail("aborted", INTERRUPTED)
        except click.ClickException as err:
            fail(err.format_message(), USAGE_ERROR)
        except click.exceptions.Exit as exit_:
            sys.exit(exit_.exit_code)

    def unknown_option(self, err: click.NoSuchOption) -> str:
        """A better line than click's guess for an option this command lacks, else ''."""
        return ""
