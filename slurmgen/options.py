"""The job commands' options (`slurmgen render`, `check`, `fit`, `submit`), built from their one
declaration: the JobSpec and SlowNodes fields (plan.option_fields), and CommandLine below for the few
that are no field. Each command shows the options it uses; spec_from_options is one loop over the
fields, with a converter only where the command line's value is not the field's."""

from __future__ import annotations

import os
import typing
from typing import Optional

import click

from slurmgen.errors import OneLineErrors
from slurmgen.frozen_records import frozen
from slurmgen.help_sections import SectionedCommand, section
from slurmgen.long_flags import long_flags
from slurmgen.plan import sweep
from slurmgen.plan.option_fields import (CHECK, EVERY, FIT, LAUNCH, LAYOUT, RENDER, SECTIONS, SITE, SUBMIT, JobOption,
                                         declared, nested, option)
from slurmgen.plan.spec import CONTAINER_RUNTIMES, JobSpec
from slurmgen.plan.words import SpecError, parse_env, parse_gpus, parse_port_range
from slurmgen.site import auto_request


class OneLineCommand(OneLineErrors, SectionedCommand):
    """A command whose bad input is one line and exit status 2; its options in --help sections."""

    def unknown_option(self, err: click.NoSuchOption) -> str:
        return elsewhere(err)

    def parse_args(self, ctx, args):
        return super().parse_args(ctx, long_flags(self, args))


@frozen(eq=False)
class CommandLine:
    """The options that fill no field as they are: a converter (CONVERTERS) reads them."""

    nodes: Optional[int] = option(None, "--nodes", "-N", section=LAYOUT, commands=EVERY, after="",
                                  help="Number of nodes  [default: 1; with --gpus auto: as few as fit].")
    world_size: Optional[int] = option(None, "--world-size", section=LAYOUT, commands=EVERY, after="gpu_type",
                                       help="With --gpus auto: use exactly this many GPUs.")
    max_gpus: Optional[int] = option(None, "--max-gpus", section=LAYOUT, commands=EVERY, after="world_size",
                                     help="With --gpus auto: as many GPUs as are free now, up to this.")
    min_gpus: Optional[int] = option(None, "--min-gpus", section=LAYOUT, commands=EVERY, after="max_gpus",
                                     help="With --gpus auto and --max-gpus: at least this many, or refuse.")
    setup_file: Optional[str] = option(None, "--setup-file", section=LAUNCH, after="setup",
                                       help="File of setup lines, run before launching.")
    container: Optional[str] = option(
        None, "--container", section=SITE, metavar="RUNTIME:IMAGE", after="",
        help="Every step in an image: apptainer:IMAGE.sif or singularity:IMAGE.sif (apptainer exec --nv, the job's"
             " directories bound), pyxis:IMAGE (as --container-image).")


class _FilePath(click.Path):
    """click.Path, with a NUL in the name (a profile can hold one) a usage error, not a traceback."""

    def convert(self, value, param, ctx):
        if "\0" in str(value):
            self.fail(f"{value!r}: a file name has no NUL character", param, ctx)
        return super().convert(value, param, ctx)


# A click type beyond what the field's type says.
CLICK_TYPES = {"setup_file": _FilePath(dir_okay=False)}


@frozen(eq=False)
class Entry:
    """One job option: its declaration, its default as the command line writes it, its value type."""

    option: JobOption
    default: object
    kind: type  # bool, int, float, str, or list (repeatable)


# A field's type read from its annotation as written (the option modules import annotations from
# __future__): evaluating them all (typing.get_type_hints) took ~1 ms of every command (issue 43).
_SCALARS = {"bool": bool, "int": int, "float": float, "str": str}


def _kind(annotation, given) -> type:
    """What the command line gives: `given`, else the field's type (X of Optional[X]; a tuple: repeatable)."""
    if given is not None:
        return given
    if isinstance(annotation, str):
        if annotation.startswith("Optional["):
            annotation = annotation[len("Optional["):-1]
        return list if annotation == "tuple" or annotation.startswith("tuple[") else _SCALARS[annotation]
    if typing.get_origin(annotation) is typing.Union:  # a class declared without the __future__ import
        annotation = next(a for a in typing.get_args(annotation) if a is not type(None))
    return list if annotation is tuple or typing.get_origin(annotation) is tuple else annotation


def _entries(cls) -> list[Entry]:
    found = [Entry(o, o.text(f.default), _kind(f.type, o.given)) for f, o in declared(cls)]
    for field in nested(cls):
        found += _entries(type(field.default))
    return found


def _in_order(entries: list[Entry], extras: list[Entry]) -> list[Entry]:
    """--help's order: by section, each in field order, an option that is no field after its `after`."""
    entries = list(entries)
    for extra in extras:
        same = [i for i, e in enumerate(entries) if e.option.section == extra.option.section]
        named = [i + 1 for i, e in enumerate(entries) if e.option.name == extra.option.after]
        entries.insert(named[0] if named else same[0], extra)
    return sorted(entries, key=lambda e: SECTIONS.index(e.option.section))


def entries(spec_class=JobSpec) -> list[Entry]:
    """Every job option in --help's order: the spec's fields (nested ones too), then CommandLine's."""
    return _in_order(_entries(spec_class), _entries(CommandLine))


ENTRIES = entries()


def option_names(command: str = RENDER) -> list[str]:
    """Parameter names of the job options `command` shows (as click passes them)."""
    return [e.option.name for e in ENTRIES if command in e.option.commands]


def shown_by(flag: str) -> list[str]:
    """The commands that show this job option (none: no job option is spelled so)."""
    for entry in ENTRIES:
        if flag in (f for spelled in entry.option.flags for f in spelled.split("/")):
            return [c for c in (RENDER, CHECK, FIT, SUBMIT) if c in entry.option.commands]
    return []


def _click_option(entry: Entry):
    opt, kind = entry.option, entry.kind
    shown = not (entry.default is None or entry.default is False or entry.default == ())  # 0 is shown
    attrs = dict(default=entry.default, help=opt.help, metavar=opt.metavar, show_default=shown)
    if kind is bool:
        if "/" not in opt.flags[0]:  # a pair (--preflight/--no-preflight) is a flag by its slash
            attrs["is_flag"] = True
    elif kind is list:
        attrs["multiple"] = True
    elif opt.choices:
        attrs["type"] = click.Choice(list(opt.choices))
    else:
        attrs["type"] = CLICK_TYPES.get(opt.name, kind)
    return click.option(*opt.flags, opt.name, **{k: v for k, v in attrs.items() if v is not None})


def _apply_profile(ctx: click.Context, _param, name):
    """Eager: fill click's default_map from the profile before any other option is read. A profile
    may set any job option; a command takes those it shows; a job file's keys (-f) win over it."""
    from slurmgen.plan import profiles

    try:
        values, path = profiles.load(name, {e.option.name: e.kind is list for e in ENTRIES})
    except SpecError as err:
        raise click.UsageError(str(err)) from None
    shown = {p.name for p in ctx.command.params}
    _file, from_file = ctx.meta.get("slurmgen.job_file", ("", ()))
    values = {k: v for k, v in values.items() if k in shown and k not in from_file}
    ctx.default_map = {**(ctx.default_map or {}), **values}
    ctx.meta["slurmgen.profile"] = (name or "default", path) if values or name else None
    return name


def _apply_file(ctx: click.Context, _param, path):
    """Eager: the job file's values into click's default_map (over a profile's), so that the options
    given on the command line win; its `args` are the training arguments unless `--` gives some."""
    if path is None:
        return path
    from slurmgen import job_file

    try:
        values = job_file.for_command(ENTRIES, job_file.read(ENTRIES, path), ctx.command.name, f"{path}: ")
    except SpecError as err:
        raise click.UsageError(str(err)) from None
    ctx.default_map = {**(ctx.default_map or {}), **values}
    ctx.meta["slurmgen.job_file"] = (path, set(values))
    return path


def _profile_option():
    return click.option("--profile", default=None, is_eager=True, expose_value=False, callback=_apply_profile,
                        help="Profile (table) in slurmgen.toml; [default] applies without it.")


def _file_option():
    return click.option("-f", "--file", "job_file", default=None, is_eager=True, expose_value=False,
                        callback=_apply_file, metavar="JOB.toml", type=_FilePath(dir_okay=False),
                        help="Job file: job options (keys: the long options) and the training arguments (args);"
                             " options given here win. render --show-config writes one.")


def job_options(command: str):
    """Decorate a click command with the job options `command` shows, in --help's sections, then the
    training arguments after --."""
    def decorate(func):
        func = click.argument("train_args", nargs=-1, type=click.UNPROCESSED)(func)
        for title in reversed(SECTIONS):
            options = [_click_option(e) for e in ENTRIES if e.option.section == title and command in e.option.commands]
            if title == SITE:
                options += [_file_option(), _profile_option()]
            if options:
                func = section(title, *options)(func)
        return func
    return decorate


def describe_settings(ctx: click.Context, params: dict) -> str:
    """Effective job settings as a job file (-f reads it back), each with where it came from
    (command line, job file, profile, default)."""
    from click.core import ParameterSource

    from slurmgen.settings_text import job_file

    profile = ctx.meta.get("slurmgen.profile")
    path, from_file = ctx.meta.get("slurmgen.job_file", ("", ()))
    origin = {ParameterSource.COMMANDLINE: "command line", ParameterSource.ENVIRONMENT: "environment",
              ParameterSource.DEFAULT: "default", ParameterSource.DEFAULT_MAP:
              f"profile [{profile[0]}] in {profile[1]}" if profile else "profile"}
    sources = {name: origin.get(ctx.get_parameter_source(name), "default") for name in params}
    sources.update({name: f"job file {path}" for name in from_file if sources.get(name, "").startswith("profile")})
    return job_file(ENTRIES, params, sources)


def container_choice(container: Optional[str], image: Optional[str]) -> dict:
    """--container RUNTIME:IMAGE, or --container-image IMAGE (pyxis), as spec fields."""
    if container is None:
        return {"container_image": image}
    if image is not None:
        raise SpecError(f"--container {container!r} and --container-image {image!r}: give one of them")
    runtime, _, path = container.partition(":")
    if runtime not in CONTAINER_RUNTIMES or not path:
        raise SpecError(f"--container {container!r}: give RUNTIME:IMAGE with RUNTIME one of"
                        f" {', '.join(CONTAINER_RUNTIMES)}, e.g. apptainer:/images/train.sif")
    return {"container_image": _image_path(container, runtime, path), "container_runtime": runtime}


def _image_path(container: str, runtime: str, path: str) -> str:
    """An apptainer image given relative to here is made absolute (the steps run in the job's own
    directory) and must exist now, as --script must; an absolute path may be the nodes' own, and a
    URI (docker://, library://) or a pyxis image is the runtime's to fetch."""
    if runtime == "pyxis" or "://" in path or os.path.isabs(path):
        return path
    if not os.path.exists(path):
        raise SpecError(f"--container {container!r}: no such image {os.path.abspath(path)!r}; give an existing"
                        " file, or an absolute path the nodes see")
    return os.path.abspath(path)


def installed_release() -> Optional[str]:
    """The installed sbatch's release ("22.05"), asked once here, at the edge: the plan asks nothing."""
    from slurmgen.site import slurm_release

    found = slurm_release.installed()
    return slurm_release.name(found) if found else None


# ------------------------------------------------------------------ the converters
def _layout(raw: dict) -> dict:
    """--gpus (counts, or auto with its limits) and --nodes; auto also pins the nodes it chose."""
    if raw["gpus"].strip().lower() != "auto":
        auto_request.refuse_auto_only(raw)
        return {"gpus": parse_gpus(raw["gpus"], 1 if raw["nodes"] is None else raw["nodes"])}
    gpus, raw["nodelist"], origin = auto_request.auto_layout_choice(raw)
    return {"gpus": gpus, "layout_origin": origin}


def _setup(raw: dict) -> dict:
    lines = list(raw["setup"])
    if raw["setup_file"]:
        from pathlib import Path  # only for a setup file: render imports no pathlib otherwise (issue 43)

        try:
            text = Path(raw["setup_file"]).read_text()
        except OSError as err:
            raise SpecError(f"--setup-file {raw['setup_file']!r}: {err.strerror}") from None
        except (ValueError, UnicodeDecodeError):  # a NUL in the name (a profile's), or no text in the file
            raise SpecError(f"--setup-file {raw['setup_file']!r}: not a readable text file") from None
        lines += [line for line in text.splitlines() if line.strip()]
    return {"setup": tuple(lines)}


def _nodelist(raw: dict) -> dict:
    if not raw["nodelist"]:
        return {"nodelist": ()}
    import hostlist  # python-hostlist; expands node[1-4]

    try:
        return {"nodelist": tuple(hostlist.expand_hostlist(raw["nodelist"]))}
    except (hostlist.BadHostlist, ValueError) as err:  # ValueError: digits int() refuses
        raise SpecError(f"--nodelist {raw['nodelist']!r}: {err}") from None


def _script(raw: dict) -> dict:
    script = raw["script"]
    if script is not None and not os.path.isfile(script):
        raise SpecError(f"--script {script!r}: no such file")
    return {"script": os.path.abspath(script) if script else None}


# (the fields it gives, the converter), in the order their errors are met; every other field's value
# is the option's own. The paths are made absolute: the job runs elsewhere.
CONVERTERS = [
    (("gpus", "layout_origin"), _layout),
    (("setup",), _setup),
    (("nodelist",), _nodelist),
    (("script",), _script),
    (("code",), lambda raw: {"code": None}),  # the snapshot: measured later by the commands that write (slurmgen.snapshot)
    (("gpu_type",), lambda raw: {"gpu_type": tuple(raw["gpu_type"].split(",")) if raw["gpu_type"] is not None else ()}),
    (("log_dir",), lambda raw: {"log_dir": os.path.abspath(raw["log_dir"])}),
    (("env",), lambda raw: {"env": parse_env(raw["env"])}),
    (("port_range",), lambda raw: {"port_range": parse_port_range(raw["port_range"])}),
    (("train_args",), lambda raw: {"train_args": tuple(raw.get("train_args", ()))}),
    (("hf_home",), lambda raw: {"hf_home": os.path.abspath(raw["hf_home"]) if raw["hf_home"] else None}),
    (("container_image", "container_runtime"), lambda raw: container_choice(raw["container"], raw["container_image"])),
    (("slurm_version",), lambda raw: {"slurm_version": raw["slurm_version"] or
                                      (installed_release() if raw["sbatch"] else None)}),
    (("sweep",), lambda raw: {"sweep": sweep.parse(raw["sweep"], raw["sweep_mode"])}),
    (("after",), lambda raw: {"after": sweep.parse_after(raw["after"])}),
]


def _build(cls, raw: dict, converted: dict):
    """A dataclass of option fields: each field the option's value, unless a converter gave it."""
    values = {f.name: raw[o.name] for f, o in declared(cls)}
    values.update({f.name: _build(type(f.default), raw, {}) for f in nested(cls)})
    return cls(**{**values, **converted})


def spec_from_options(params: dict, spec_class=JobSpec) -> JobSpec:
    """click parameters -> validated JobSpec. An option the command does not show has its declared
    default. Raises SpecError with one user-facing line."""
    raw = {**{e.option.name: e.default for e in ENTRIES}, **params}
    converted = {}
    for _, convert in CONVERTERS:
        converted.update(convert(raw))
    return _build(spec_class, raw, converted).validate()


def elsewhere(err: click.NoSuchOption) -> str:
    """For a job option another command has (submit's --spares): which ones, not click's guess."""
    name = err.ctx.command.name if err.ctx else ""
    others = [c for c in shown_by(err.option_name) if c != name]
    if not others or name in shown_by(err.option_name):
        return ""
    where = ", ".join(others[:-1]) + " and " + others[-1] if len(others) > 1 else others[0]
    return f"{err.option_name} is not an option of {err.ctx.command_path}; slurmgen {where} take it"
