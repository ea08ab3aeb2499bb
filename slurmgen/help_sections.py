"""Help in sections: a command's options under titled blocks (Script, Layout, Resources, ...) in
--help and in the docs' CLI reference, at no cost to a run. The command is a plain click command;
cloup, which lays the sections out, is imported only when help is shown (issue 43: cloup and the
importlib.metadata it loads were a third of a render's time)."""

from __future__ import annotations

import click


def section(title: str, *options):
    """Decorator: click options shown under `title` in --help (cloup.option_group's form, no cloup)."""
    def decorate(func):
        if not hasattr(func, "__click_params__"):
            func.__click_params__ = []
        params = func.__click_params__
        for add in reversed(options):  # click reverses the list when it builds the command
            before = len(params)
            add(func)
            for param in params[before:]:
                param.section = title
        return func
    return decorate


class SectionedCommand(click.Command):
    """A click command whose --help shows its options in their sections, laid out by cloup."""

    def get_help(self, ctx: click.Context) -> str:
        twin, twin_ctx = cloup_twin(self, ctx)
        return twin.get_help(twin_ctx)


def cloup_twin(command: click.Command, ctx: click.Context):
    """The same command as a cloup.Command (the same options, in their sections) and a context for it
    with ctx's place and defaults, so that cloup prints the help this command has always had."""
    import cloup

    groups = {}
    for param in command.params:
        title = getattr(param, "section", None)
        if title is not None:
            param.group = groups.setdefault(title, cloup.OptionGroup(title))
    twin = cloup.Command(name=command.name, context_settings=command.context_settings, callback=command.callback,
                         params=command.params, help=command.help, epilog=command.epilog,
                         short_help=command.short_help, options_metavar=command.options_metavar,
                         add_help_option=command.add_help_option, no_args_is_help=command.no_args_is_help,
                         hidden=command.hidden, deprecated=command.deprecated)
    twin_ctx = twin.context_class(twin, info_name=ctx.info_name, parent=ctx.parent, **command.context_settings)
    twin_ctx.default_map = ctx.default_map  # a profile's values are the defaults --help shows
    return twin, twin_ctx


def params_help(command: click.Command, ctx: click.Context) -> str:
    """The option sections of --help alone, as it prints them (the docs' CLI reference)."""
    twin, twin_ctx = cloup_twin(command, ctx)
    formatter = twin_ctx.make_formatter()
    twin.format_params(twin_ctx, formatter)
    return formatter.getvalue()
