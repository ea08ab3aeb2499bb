"""Job options declared once, as the fields they fill: a JobSpec (or SlowNodes) field carries its
option's flags, help, section and the commands that show it; slurmgen.options builds the commands'
options and the spec from these fields. No click here: the plan stays pure."""

from __future__ import annotations

import dataclasses
from typing import Optional

from slurmgen.frozen_records import frozen

# --help's sections, in their order.
LAYOUT = "Layout"
RESOURCES = "Resources"
LAUNCH = "Launch"
FAULTS = "Fault tolerance"
SLOW = "Slow nodes"
SWEEPS = "Sweeps and dependencies"
SITE = "Site and containers"
OUTPUT = "Output"
SECTIONS = (LAYOUT, RESOURCES, LAUNCH, FAULTS, SLOW, SWEEPS, SITE, OUTPUT)

# Which commands show an option. A rendered script honours every option (render, check); fit reads
# the layout and the memory; submit (one task per GPU through submitit) leaves out what it refuses or
# ignores (a launcher, spares, the network check, Slurm's own log names, ...).
RENDER, CHECK, FIT, SUBMIT = "render", "check", "fit", "submit"
EVERY = frozenset({RENDER, CHECK, FIT, SUBMIT})
JOBS = frozenset({RENDER, CHECK, SUBMIT})
SCRIPTS = frozenset({RENDER, CHECK})


@frozen(eq=False)
class JobOption:
    """A job option as the command line shows it."""

    flags: tuple[str, ...]          # ("--nodes", "-N"); a boolean's pair: ("--preflight/--no-preflight",)
    section: str
    help: str
    metavar: Optional[str] = None
    choices: tuple[str, ...] = ()
    commands: frozenset = JOBS
    # What the command line gives when it is not the field's value: str (one text) or list (repeatable
    # text); slurmgen.options has the converter that makes the field's value of it.
    given: Optional[type] = None
    sep: str = ","                  # how a tuple default is written as text (--port-range 20000-29999)
    after: Optional[str] = None     # an option that is no field: shown after this one ("": first)

    @property
    def name(self) -> str:
        """The parameter's name, as click passes it and as profiles spell it (with _ for -)."""
        return self.flags[0].lstrip("-").split("/")[0].replace("-", "_")

    def text(self, default):
        """The field's default as the command line writes it (given=str: text; list: a tuple)."""
        if self.given is list:
            return tuple(default)
        if self.given is str and isinstance(default, tuple):
            return self.sep.join(map(str, default)) or None
        return default


def option(default, *flags: str, section: str, help: str, **more) -> dataclasses.Field:
    """A dataclass field that is a job option: its default is the option's default."""
    return dataclasses.field(default=default, metadata={"option": JobOption(flags, section, help, **more)})


def declared(cls) -> list[tuple[dataclasses.Field, JobOption]]:
    """The fields of a dataclass that are job options, in field order."""
    return [(f, f.metadata["option"]) for f in dataclasses.fields(cls) if "option" in f.metadata]


def nested(cls) -> list[dataclasses.Field]:
    """The fields whose value is a dataclass of options of its own (JobSpec.slow_nodes)."""
    return [f for f in dataclasses.fields(cls)
            if dataclasses.is_dataclass(f.default) and declared(type(f.default))]
