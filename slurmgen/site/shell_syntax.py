"""`bash -n` on a script before it is written: a --setup line that does not parse (an unclosed quote)
is refused at render, not found by every node after the queue wait."""

from __future__ import annotations

import re
from typing import Optional

from slurmgen.plan.words import SpecError
from slurmgen.site.child_process import Child


# `bash -n` reads a script from a pipe one byte at a time (so as not to take input meant for the
# commands it would run): a 5 KB script is 5,000 reads, 1.3 ms a render waited for after feeding it.
# `.` reads its file whole, in blocks; the text's own first line, `set -n`, then has the rest parsed
# and never run, as bash -n does. An empty environment: no BASH_ENV (sourced by a non-interactive
# bash that is not -n: a site's module init), SHELLOPTS or BASHOPTS changes what is parsed or run.
# Where `.` cannot open /dev/stdin (no /proc), bash says so with status 1 (a parse error is 2): the
# text goes to `bash -n` instead.
_BASH = ["bash", "-c", ". /dev/stdin"]
_NOT_OPENED = 1
_NO_EXEC = b"set -n\n"
_WHERE = r"^(?:\S*bash: )?(?:/dev/stdin: )?line (\d+): "  # bash's "where", then in the text's own lines


class Parse:
    """`bash -n` on a script: bash started now, the text given now or later (feed()), the verdict read
    last (error()). Started before the script is rendered, bash's own start costs a render nothing;
    fed, it parses while the caller waits on sinfo. No bash here: it parses."""

    def __init__(self, text: Optional[str] = None):
        self.said: Optional[str] = None
        self.fed = b""  # what bash was given, `set -n` first: kept for the fallback
        try:
            self.bash: Optional[Child] = Child(_BASH, read=2, stdin=True, env={})
        except OSError:
            self.bash = None
        if text is not None:
            self.feed(text)

    def feed(self, text: str) -> "Parse":
        """The whole script, once (bash reads it all, then parses)."""
        if self.bash is not None:
            self.fed = _NO_EXEC + text.encode("utf-8", "surrogateescape")
            self.bash.feed(self.fed)
        return self

    def close(self) -> None:
        """Nothing to parse after all: bash ends on an empty script, and is reaped."""
        self.error()

    def error(self) -> Optional[str]:
        """bash's first complaint, or None when it parses (read once, then kept); never fed, the
        script is empty."""
        if self.bash is not None and self.bash.returncode is None:
            said = self.bash.finish()
            if self.bash.returncode == _NOT_OPENED:
                self.bash = Child(["bash", "-n"], read=2, stdin=True, env={})
                self.bash.feed(self.fed)  # the same lines as through `.`
                said = self.bash.finish()
            if self.bash.returncode != 0:
                lines = [line for line in said.decode(errors="replace").splitlines() if line.strip()]
                self.said = (re.sub(_WHERE, lambda where: f"line {int(where.group(1)) - 1}: ", lines[0]) if lines
                             else f"exit status {self.bash.returncode}")
        return self.said


def bash_error(text: str) -> Optional[str]:
    """bash's first complaint about `text`, or None when it parses (or there is no bash here)."""
    return Parse(text).error()


def check_script(text: str, setup: tuple[str, ...], parse: Optional[Parse] = None) -> None:
    """Raises SpecError when `text` does not parse (`parse`: its Parse, started earlier): naming the
    --setup lines when they alone do not, else the script itself (a fault of slurmgen's, to be
    reported)."""
    if (parse or Parse(text)).error() is None:
        return
    if setup:
        error = bash_error("\n".join(setup) + "\n")
        if error:
            shown = setup[0] if len(setup) == 1 else "; ".join(setup)
            raise SpecError(f"--setup {shown!r}: not a shell line bash can parse ({error})")
    raise SpecError(f"the script does not parse ({bash_error(text)}): a fault of slurmgen's; please report it with"
                    " the command line")
