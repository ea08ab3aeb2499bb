"""The floor the job needs on its nodes (issue 41): bash 4.4 and Python 3.9, each checked at the start
of the script in one line, before any step. What is below the floor is refused with that line and
exit status 1; what is on it goes on. The interpreters at the floor themselves cannot be installed
here (neither PyPI nor Debian 12 ships bash 4.4 or Python 3.9): the Python is a stand-in that answers
as Python 3.8 or 3.9 would, and bash's check is run with the version it reads replaced."""
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurmgen.cli import cli


def render(tmp_path: Path, python: str) -> Path:
    out = tmp_path / "job.sh"
    done = CliRunner().invoke(cli, ["render", "--nodes", "2", "--gpus", "1", "--python", python,
                                    "--log-dir", str(tmp_path / "logs"), "-o", str(out)])
    assert done.exit_code == 0, done.output
    return out


def stand_in(tmp_path: Path, version: str) -> str:
    """A `python3` that answers the script's version check as Python VERSION would (and nothing else)."""
    path = tmp_path / version / "python3"
    path.parent.mkdir()
    major, minor = (int(part) for part in version.split(".")[:2])
    below = 1 if (major, minor) < (3, 9) else 0
    path.write_text(f'#!/bin/sh\n[ "$1" = -V ] && {{ echo "Python {version}"; exit 0; }}\n'
                    f'[ "$1" = -c ] && case "$2" in *"version_info < (3, 9)"*) exit {below};; esac\n'
                    'echo "python3 stand-in: $*" >&2\nexit 7\n')
    path.chmod(0o755)
    return str(path)


def test_a_python_below_3_9_is_refused_in_one_line_before_any_step(tmp_path):
    python = stand_in(tmp_path, "3.8.18")
    done = subprocess.run(["bash", str(render(tmp_path, python))], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.endswith(f"slurmgen: {python} on {subprocess.getoutput('hostname')} is not Python 3.9 or"
                                " newer, which slurmgen needs: Python 3.8.18\n"), done.stderr
    assert "srun" not in done.stderr


def test_python_3_9_passes_the_check_and_the_script_goes_on(tmp_path):
    python = stand_in(tmp_path, "3.9.18")
    done = subprocess.run(["bash", str(render(tmp_path, python))], capture_output=True, text=True, cwd=tmp_path)
    assert "is not Python 3.9 or newer" not in done.stderr
    # the script's next look at it, past the floor: whether it imports slurmgen (a stand-in does not)
    assert done.stderr.endswith(f"slurmgen: {python} on {subprocess.getoutput('hostname')} cannot import slurmgen,"
                                " whose job runtime this script runs: install it there, or load it with --setup\n"), \
        done.stderr


def bash_check(tmp_path: Path) -> str:
    """The script's own bash floor line (the first BASH_VERSINFO line), as rendered."""
    text = render(tmp_path, "python3").read_text()
    lines = [line for line in text.splitlines() if "BASH_VERSINFO" in line]
    assert len(lines) == 1 and text.index(lines[0]) < text.index("srun"), lines
    return lines[0]


@pytest.mark.parametrize("version, refused", [((4, 3), True), ((3, 2), True), ((4, 4), False), ((5, 0), False),
                                              ((5, 2), False)])
def test_bash_below_4_4_is_refused_in_one_line(tmp_path, version, refused):
    # BASH_VERSINFO and BASH_VERSION are read-only: the check reads stand-ins with the version given
    line = bash_check(tmp_path).replace("BASH_VERSINFO", "V").replace("$BASH_VERSION", "$FAKE_VERSION")
    fake = f"{version[0]}.{version[1]}.48(1)-release"
    program = f"V=({version[0]} {version[1]}); FAKE_VERSION='{fake}'\n{line}\necho past the floor\n"
    done = subprocess.run(["bash", "-c", program], capture_output=True, text=True)
    if refused:
        assert done.returncode == 1 and done.stdout == ""
        assert done.stderr == f"slurmgen: this script needs bash 4.4 or newer; $BASH runs {fake}\n".replace(
            "$BASH", subprocess.getoutput("command -v bash")), done.stderr
    else:
        assert done.returncode == 0 and done.stdout == "past the floor\n" and done.stderr == ""
