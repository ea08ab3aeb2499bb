"""Plan -> script text through the Jinja templates. No I/O beyond reading templates."""

from __future__ import annotations

import functools
import importlib.util
import os
import shlex
from pathlib import Path

import jinja2

from slurmgen import __version__
from slurmgen.plan import Plan


def template_dir() -> Path:
    """Templates ship inside the wheel as slurmgen/templates; a checkout keeps them in templates/."""
    spec = importlib.util.find_spec("slurmgen.templates")
    for location in (spec.submodule_search_locations or []) if spec else []:
        if (Path(location) / "job.sh.j2").is_file():
            return Path(location)
    return Path(__file__).resolve().parent.parent / "templates"


def comment(text: str) -> str:
    """Keep a value on one comment line: a newline would otherwise start live shell code."""
    return text.encode("unicode_escape").decode("ascii")


def _bytecode_cache():
    """Compiled templates in the user's cache: render is run often on busy login nodes."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    directory = os.path.join(base, "slurmgen", f"jinja-{__version__}")
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError:
        return None
    return jinja2.FileSystemBytecodeCache(directory)


@functools.lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(template_dir())),
        bytecode_cache=_bytecode_cache(),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters["q"] = lambda value: shlex.quote(str(value))
    env.filters["comment"] = comment
    return env


def _common_options(spec) -> list[tuple[str, str]]:
    """#SBATCH options repeated on every component, in a fixed order."""
    pairs = [("partition", spec.partition), ("account", spec.account), ("qos", spec.qos),
             ("time", spec.time), ("mem", spec.mem), ("constraint", spec.constraint),
             ("exclude", spec.exclude)]
    return [(key, value) for key, value in pairs if value]


def _component_name(comp) -> str:
    gpus = "GPU" if comp.gpus_per_node == 1 else "GPUs"
    return f"component {comp.index} ({comp.nodes} node(s) x {comp.gpus_per_node} {gpus})"


def run_length(counts) -> str:
    """1,1,2,2 -> 1(x2),2(x2): Slurm's own compact form, so 1024 nodes stay one short line."""
    runs: list[list[int]] = []
    for count in counts:
        if runs and runs[-1][0] == count:
            runs[-1][1] += 1
        else:
            runs.append([count, 1])
    return ",".join(str(c) if n == 1 else f"{c}(x{n})" for c, n in runs)


def render(plan: Plan, command: str = "slurmgen render") -> str:
    spec = plan.spec
    context = {
        "spec": spec,
        "plan": plan,
        "version": __version__,
        "command": command,
        "target": spec.target,
        "log_dir": spec.log_dir,
        "layout": run_length(spec.gpus),
        "nodelist_var": "SLURM_JOB_NODELIST_HET_GROUP_0" if plan.heterogeneous else "SLURM_JOB_NODELIST",
        "port_span": spec.port_range[1] - spec.port_range[0] + 1,
        "het_flag": [f"--het-group={c.index} " if plan.heterogeneous else "" for c in plan.components],
        "component_names": [_component_name(c) for c in plan.components],
        "common_options": _common_options(spec),
        # Leave room inside the grace period for the requeue itself.
        "stop_wait": max(spec.grace - 15, 5),
    }
    return environment().get_template("job.sh.j2").render(context)
