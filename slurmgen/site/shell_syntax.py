"""`bash -n` on a script before it is written: a --setup line that does not parse (an unclosed quote)
is refused at render, not found by every node after the queue wait."""

from __future__ import annotations

import re
from typing import Optional

from slurmgen.plan.words import SpecError
from slurmgen.site.child_process import Child


class Parse:
    """`bash -n` on a script: bash started now, the text given now or later (feed()), the verdict read
    last (error()). Started before the script is rendered, bash's own start costs a render nothing;
    fed, it parses while the caller waits on sinfo. No bash here: it parses."""

    def __init__(self, text: Optional[str] = None):
        self.said: Optional[str] = None
        try:
            self.bash: Optional[Child] = Child(["bash", "-n"], read=2, stdin=True)
        except OSError:
            self.bash = None
        if text is not None:
            self.feed(text)

    def feed(self, text: str) -> "Parse":
        """The whole script, once (bash reads as it parses, and stops at the first error)."""
        if self.bash is not None:
            self.bash.feed(text.encode("utf-8", "surrogateescape"))
        return self

    def close(self) -> None:
        """Nothing to parse after all: bash ends on an empty script, and is reaped."""
        self.error()

    def error(self) -> Optional[str]:
        """bash's first complaint, or None when it parses (read once, then kept); never fed, the
        script is empty."""
        if self.bash is not None and self.bash.returncode is None:
            said = self.bash.finish()
            if self.bash.returncode != 0:
                lines = [line for line in said.decode(errors="replace").splitlines() if line.strip()]
                self.said = re.sub(r"^\S*bash: ", "", lines[0]) if lines else f"exit status {self.bash.returncode}"
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
