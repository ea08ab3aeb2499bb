"""`slurmgen`, the command group. Each command's module is imported when that command runs, so
`slurmgen --help`, `--version` and a mistyped command cost click alone (issue 43: under 0.1 s)."""

from __future__ import annotations

import importlib

from slurmgen.uncollected import as_command, as_quick_command, leave, uncollected

with uncollected():  # click's objects live to the end
    import click

    from slurmgen import __version__
    from slurmgen.errors import OneLineErrors

# name: (module, attribute, short help). The short help lives here, not on the command, so that
# listing the commands imports none of them.
COMMANDS = {
    "render": ("slurmgen.job_commands", "render_command", "Write the sbatch script of a training job."),
    "check": ("slurmgen.check_commands", "check_command", "Say whether the layout can run on this cluster, and where."),
    "fit": ("slurmgen.check_commands", "fit_command", "Say what would fit on the GPUs before queueing."),
    "submit": ("slurmgen.submit.command", "submit_command",
               "Submit the job from Python (submitit) and follow it to its end."),
    "watch": ("slurmgen.observe_commands", "watch_command",
              "Follow a job (or a sweep's jobs) to its end: state, step, loss."),
    "report": ("slurmgen.observe_commands", "report_command", "Compare runs: a ranked table, report.html and plots."),
    "status": ("slurmgen.life_commands", "status_command", "Say where jobs stand: state, step, loss, restarts, logs."),
    "logs": ("slurmgen.life_commands", "logs_command", "Print (or follow) a job's logs."),
    "cancel": ("slurmgen.life_commands", "cancel_command", "Cancel a job for good."),
    "list": ("slurmgen.life_commands", "list_command", "List your slurmgen jobs."),
}
# Commands that end in a moment, write their files with `with` and start no thread: their process
# ends without the interpreter's teardown (slurmgen.uncollected.leave).
QUICK = {"render", "check", "fit"}


class LazyGroup(OneLineErrors, click.Group):
    """The group's commands from COMMANDS, each imported on first use; bad input is one line, exit 2."""

    def list_commands(self, ctx):
        return sorted(COMMANDS)

    def get_command(self, ctx, name):
        if name not in COMMANDS:
            return None
        module, attribute, short_help = COMMANDS[name]
        with uncollected():  # the command's modules
            command = getattr(importlib.import_module(module), attribute)
        command.short_help = short_help
        if name in QUICK:
            as_quick_command()
        return command

    def unknown_option(self, err: click.NoSuchOption) -> str:
        from slurmgen.options import elsewhere

        return elsewhere(err)

    def format_commands(self, ctx, formatter):
        with formatter.section("Commands"):
            formatter.write_dl([(name, COMMANDS[name][2]) for name in self.list_commands(ctx)])


@click.group(cls=LazyGroup, invoke_without_command=True,
             context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="slurmgen")
@click.pass_context
def cli(ctx):
    """Correct multi-node, multi-GPU training jobs for Slurm, uneven clusters included.

    \b
      slurmgen render --nodes 4 --gpus 1,1,2,2 -o job.sh -- --model_name_or_path M --dataset_name D && sbatch job.sh

    Shell completion: eval "$(_SLURMGEN_COMPLETE=bash_source slurmgen)" in ~/.bashrc
    (zsh_source for ~/.zshrc, fish_source for fish).
    """
    if ctx.invoked_subcommand is None:  # a bare `slurmgen` is asking what there is
        click.echo(ctx.get_help())


def every_command() -> dict:
    """Name -> command, every command imported (the docs and the tests read them all)."""
    return {name: cli.get_command(None, name) for name in cli.list_commands(None)}


def main():
    as_command()
    try:
        cli(prog_name="slurmgen")  # also as `python -m slurmgen`, and for completion's _SLURMGEN_COMPLETE
    except SystemExit as end:
        leave(end.code)
        raise
    leave(0)


if __name__ == "__main__":
    main()
