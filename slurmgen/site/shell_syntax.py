"""`bash -n` on a script before it is written: a --setup line that does not parse (an unclosed quote)
is refused at render, not found by every node after the queue wait."""

from __future__ import annotations

import re
import shutil
import subprocess
from typing import Optional

from slurmgen.plan.words import SpecError


def bash_error(text: str) -> Optional[str]:
    """bash's first complaint about `text`, or None when it parses (or there is no bash here)."""
    bash = shutil.which("bash")
    if bash is None:
        return None
    done = subprocess.run([bash, "-n"], input=text.encode("utf-8", "surrogateescape"), capture_output=True)
    if done.returncode == 0:
        return None
    lines = [line for line in done.stderr.decode(errors="replace").splitlines() if line.strip()]
    return re.sub(r"^\S*bash: ", "", lines[0]) if lines else f"exit status {done.returncode}"


def check_script(text: str, setup: tuple[str, ...]) -> None:
    """Raises SpecError when `text` does not parse: naming the --setup lines when they alone do not,
    else the script itself (a fault of slurmgen's, to be reported)."""
    if bash_error(text) is None:
        return
    if setup:
        error = bash_error("\n".join(setup) + "\n")
        if error:
            shown = setup[0] if len(setup) == 1 else "; ".join(setup)
            raise SpecError(f"--setup {shown!r}: not a shell line bash can parse ({error})")
    raise SpecError(f"the script does not parse ({bash_error(text)}): a fault of slurmgen's; please report it with"
                    " the command line")
