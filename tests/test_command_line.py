"""Issue 43, item 5: the script's `# Command:` line, run, writes the same script byte for byte, for
non-ASCII values and control characters too."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from slurmgen.script.render import command_word

pytestmark = pytest.mark.unit
REPO = Path(__file__).resolve().parent.parent

VALUES = ["--job-name", "jöb-名前", "--env", "NOTE=tab\there, 'quoted' \\ $HOME", "--env", "LINE=a\nb",
          "--setup", "echo 'ünïcode' \"$X\"", "--", "--output_dir", "runs/ü name"]


def test_command_line_reproduces_the_script(render_args, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = render_args("render", "-o", "job.sh", "--module", "mypkg.train", *VALUES)
    assert result.exit_code == 0, result.output
    first = (tmp_path / "job.sh").read_bytes()
    line = next(l for l in first.decode().splitlines() if l.startswith("# Command: "))[len("# Command: "):]
    assert "jöb-名前" in line and "\\x" not in line.split("$'")[0]  # non-ASCII as it was typed
    bin_dir = tmp_path.parent / f"{tmp_path.name}-bin"
    bin_dir.mkdir()
    (bin_dir / "slurmgen").write_text(f"#!/bin/sh\nexec {sys.executable} -m slurmgen \"$@\"\n")
    (bin_dir / "slurmgen").chmod(0o755)
    (tmp_path / "job.sh").unlink()
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": str(REPO)}
    run = subprocess.run(["bash", "-c", line], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "job.sh").read_bytes() == first


@pytest.mark.parametrize("word", ["plain", "jöb-名前", "a b", "it's", "tab\there", "line\nbreak", "\u2028",
                                  "back\\slash'quote\x01", "undecodable\udcff"])
def test_command_word_gives_bash_the_same_bytes(word):
    out = subprocess.run(["bash", "-c", f"printf %s {command_word(word)}"], capture_output=True).stdout
    assert out == word.encode("utf-8", "surrogateescape")
