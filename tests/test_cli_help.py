"""What `slurmgen` and its commands print for help: sections, an example first, `submit` as one
command with `python -m slurmgen.submit`, and shell completion through a real bash."""
import os
import re
import subprocess
import sys

import pytest

from slurmgen.options import JOB_OPTIONS, SECTIONS, option_names

COMMANDS = ["render", "check", "fit", "submit", "watch", "report"]


def slurmgen(*args, **env):
    return subprocess.run([sys.executable, "-m", "slurmgen", *args], capture_output=True, text=True,
                          env={**{k: v for k, v in os.environ.items() if k != "COLUMNS"}, **env})


def test_a_bare_slurmgen_prints_its_help_and_every_command():
    run = slurmgen()
    assert run.returncode == 0 and run.stderr == ""
    assert run.stdout.startswith("Usage: slurmgen [OPTIONS] [COMMAND] [ARGS]...\n")
    listed = re.findall(r"^  (\w+) {2,}", run.stdout.split("Commands:\n", 1)[1], re.M)
    assert sorted(listed) == sorted(COMMANDS)


@pytest.mark.parametrize("command", COMMANDS)
def test_every_commands_help_starts_with_an_example(command):
    run = slurmgen(command, "--help")
    assert run.returncode == 0, run.stderr
    first = run.stdout.split("\n\n")[1].strip()
    assert first.startswith(f"Example: slurmgen {command} "), first


def test_every_job_option_is_in_one_section_shown_in_order():
    in_sections = [name for _, names in SECTIONS for name in names]
    assert sorted(in_sections) == sorted(option_names()) and len(set(in_sections)) == len(JOB_OPTIONS)
    text = slurmgen("render", "--help").stdout
    titles = re.findall(r"^(\w[\w ]+):$", text, re.M)
    assert titles == ["Script", *(title for title, _ in SECTIONS), "Other options"]
    layout = text.split("\nLayout:\n", 1)[1].split("\n\n", 1)[0]
    assert "--gpus G[,G...]|auto" in layout and "--partition" not in layout


def test_submit_is_the_same_command_as_the_module():
    assert slurmgen("submit", "--help").stdout.split("\n", 1)[1] == subprocess.run(
        [sys.executable, "-m", "slurmgen.submit", "--help"], capture_output=True, text=True,
        env={k: v for k, v in os.environ.items() if k != "COLUMNS"}).stdout.split("\n", 1)[1]
    run = slurmgen("submit", "--nodes", "0")
    assert (run.returncode, run.stdout, run.stderr) == (2, "", "slurmgen: error: --nodes 0: must be a positive integer\n")


@pytest.mark.parametrize("words, expected", [
    ("slurmgen ren", ["render", "report"][:1]),
    ("slurmgen sub", ["submit"]),
    ("slurmgen render --gpu-t", ["--gpu-type"]),
    ("slurmgen render --launcher ", ["torchrun", "srun", "accelerate"]),
])
def test_bash_completes_commands_options_and_choices(tmp_path, words, expected):
    """As a user's ~/.bashrc line sets it up: the completion function that click writes, run by
    bash for the words typed so far."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "slurmgen").write_text(f"#!/bin/sh\nexec {sys.executable} -m slurmgen \"$@\"\n")
    (bin_dir / "slurmgen").chmod(0o755)
    script = ('eval "$(_SLURMGEN_COMPLETE=bash_source slurmgen)"\n'
              f"COMP_WORDS=({words}{' ' if words.endswith(' ') else ''}); "
              f"COMP_CWORD={len(words.split()) - (0 if words.endswith(' ') else 1)}\n"
              '_slurmgen_completion slurmgen\nprintf "%s\\n" "${COMPREPLY[@]}"\n')
    if words.endswith(" "):  # the word being completed is the empty one after the space
        script = script.replace(f"COMP_WORDS=({words} )", f"COMP_WORDS=({words}'')")
    run = subprocess.run(["bash", "-c", script], capture_output=True, text=True,
                         env=dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}"))
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == expected
