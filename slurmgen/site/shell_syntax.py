"""`bash -n` on a script before it is written: a --setup line that does not parse (an unclosed quote)
is refused at render, not found by every node after the queue wait."""

from __future__ import annotations

import re
import shutil
import subprocess
from typing import Optional

from slurmgen.plan.words import SpecError


class Parse:
    """`bash -n` on `text`, started now and read later (error()): it runs while the caller waits on
    sinfo. No bash here: it parses."""

    def __init__(self, text: str):
        bash = shutil.which("bash")
        self.proc = None if bash is None else subprocess.Popen(
            [bash, "-n"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        if self.proc is not None:
            try:  # bash reads as it parses, and stops at the first error
                self.proc.stdin.write(text.encode("utf-8", "surrogateescape"))
            except BrokenPipeError:
                pass
            finally:
                self.proc.stdin.close()

    def error(self) -> Optional[str]:
        """bash's first complaint, or None when it parses."""
        if self.proc is None:
            return None
        with self.proc.stderr:
            said = self.proc.stderr.read()
        if self.proc.wait() == 0:
            return None
        lines = [line for line in said.decode(errors="replace").splitlines() if line.strip()]
        return re.sub(r"^\S*bash: ", "", lines[0]) if lines else f"exit status {self.proc.returncode}"


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
