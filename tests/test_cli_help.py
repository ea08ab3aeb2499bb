"""What `slurmgen` and its commands print for help: sections, an example first, each command only
the options it uses, each option declared once (a JobSpec field), `submit` as one command with
`python -m slurmgen.submit`, and shell completion through a real bash."""
import dataclasses
import os
import re
import subprocess
import sys

import click
import pytest

from slurmgen import options
from slurmgen.frozen_records import frozen
from slurmgen.options import OneLineCommand
from slurmgen.plan.option_fields import FAULTS, RENDER, SECTIONS, declared, nested, option
from slurmgen.plan.slow_nodes import SlowNodes
from slurmgen.plan.spec import JobSpec

COMMANDS = ["render", "check", "fit", "submit", "watch", "report", "status", "logs", "cancel", "list"]


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
    assert {e.option.section for e in options.ENTRIES} == set(SECTIONS)
    names = [e.option.name for e in options.ENTRIES]
    assert len(names) == len(set(names))
    text = slurmgen("render", "--help").stdout
    titles = re.findall(r"^(\w[\w ]+):$", text, re.M)
    assert titles == ["Script", *SECTIONS, "Other options"]
    layout = text.split("\nLayout:\n", 1)[1].split("\n\n", 1)[0]
    assert "--gpus G[,G...]|auto" in layout and "--partition" not in layout


def shown(command: str) -> set:
    """The long options `slurmgen COMMAND --help` lists."""
    from slurmgen.cli import cli, every_command

    return {o for p in every_command()[command].params if isinstance(p, click.Option) for o in p.opts if o.startswith("--")}


EVERY_JOB_OPTION = {flag.split("/")[0] for e in options.ENTRIES for flag in e.option.flags if flag.startswith("--")}
SCRIPT_ONLY = {"--spares", "--prep", "--launcher", "--launcher-arg", "--log-name", "--error-log", "--cpus-per-node",
               "--rdzv-timeout", "--preflight", "--net-check", "--net-check-ratio", "--net-min-gbps",
               "--straggler-ratio", "--straggler-window", "--straggler-action"}


def test_render_and_check_show_every_job_option():
    assert EVERY_JOB_OPTION <= shown("render") and EVERY_JOB_OPTION <= shown("check")
    assert shown("check") == EVERY_JOB_OPTION | {"--file", "--profile"}


def test_fit_shows_only_what_fit_reads():
    assert shown("fit") == {"--json", "--nodes", "--gpus", "--world-size", "--max-gpus", "--min-gpus", "--nodelist",
                            "--partition", "--mem", "--mem-per-gpu", "--gpu-mem", "--spares", "--file", "--profile"}
    text = slurmgen("fit", "--help").stdout
    assert not {"--mail-user", "--sweep", "--container", "--launcher", "--gpu-type"} & set(re.findall(r"--[\w-]+", text))


def test_submit_leaves_out_what_it_refuses_or_ignores():
    assert shown("submit") == (EVERY_JOB_OPTION - SCRIPT_ONLY) | {
        "--file", "--profile", "--folder", "--detach", "--local", "--attach", "--interval"}
    text = slurmgen("submit", "--help").stdout
    assert "--gpu-type" in text and not {"--spares", "--prep", "--launcher", "--log-name",
                                         "--cpus-per-node"} & set(re.findall(r"--[\w-]+", text))
    run = slurmgen("submit", "--spares", "1")
    assert (run.returncode, run.stdout) == (2, "") and run.stderr == (
        "slurmgen: error: --spares is not an option of slurmgen submit; slurmgen render, check and fit take it\n")


def test_a_refusal_names_the_submit_command_as_typed():
    message = "--gpu-type 'v100,a100': {} asks for one kind of GPU (one job, one task per GPU); give one type," \
              " or use slurmgen render (a het job)\n"
    args = ["--nodes", "2", "--gpus", "1", "--gpu-type", "v100,a100"]
    assert slurmgen("submit", *args).stderr == "slurmgen: error: " + message.format("slurmgen submit")
    run = subprocess.run([sys.executable, "-m", "slurmgen.submit", *args], capture_output=True, text=True)
    assert (run.returncode, run.stderr) == (2, "slurmgen: error: " + message.format("python -m slurmgen.submit"))


def test_each_default_is_declared_once_on_its_field():
    """The click default is the field's (as the command line writes it), and an empty command line
    gives the spec of the fields' defaults."""
    from slurmgen.cli import cli, every_command

    ctx = every_command()["render"].make_context("render", [])
    for cls in (JobSpec, SlowNodes):
        for field, opt in declared(cls):
            assert ctx.params[opt.name] == opt.text(field.default), field.name
    spec = options.spec_from_options({k: v for k, v in ctx.params.items() if k in options.option_names()})
    assert spec == dataclasses.replace(JobSpec(), log_dir=os.path.abspath("logs"))


def test_every_field_is_an_option_or_given_by_a_converter():
    """The generic loop fills every option field; a converter stands in only where the command
    line's value is not the field's (and for the fields no option sets)."""
    converted = {name for fields, _ in options.CONVERTERS for name in fields}
    for cls in (JobSpec, SlowNodes):
        for field in dataclasses.fields(cls):
            opt = field.metadata.get("option")
            assert opt or field in nested(cls) or field.name in converted, field.name
            assert not (opt and opt.given) or field.name in converted, field.name


def test_a_new_option_field_appears_in_its_section_with_no_other_edit(monkeypatch):
    @frozen  # as JobSpec is declared
    class Wider(JobSpec):
        frobnicate: int = option(7, "--frobnicate", section=FAULTS, metavar="N", help="How hard to frobnicate.")

    monkeypatch.setattr(options, "ENTRIES", options.entries(Wider))
    command = click.command("render", cls=OneLineCommand)(options.job_options(RENDER)(lambda **params: params))
    text = command.get_help(command.context_class(command, info_name="render"))
    section = text.split("\nFault tolerance:\n", 1)[1].split("\n\n", 1)[0]
    assert "--frobnicate N" in section and "[default: 7]" in section
    for argv, value in ([], 7), (["--frobnicate", "9"], 9):
        params = command.make_context("render", argv).params
        assert options.spec_from_options(params, Wider).frobnicate == value


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
