"""Plan -> script text through the Jinja templates. No I/O beyond reading templates."""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import shlex
import unicodedata

import jinja2

from slurmgen import __version__
from slurmgen.plan.layout import Plan, model_path
from slurmgen.plan.passthrough import sbatch_lines
from slurmgen.plan.sweep import dependency, waits_for
from slurmgen.plan.launch import container_args, container_dirs, container_exec, iface_prefixes, rank_exports
from slurmgen.plan.runtime import runtime_spec, stop_wait
from slurmgen.plan.spec import DEFAULT_LOG_NAME
from slurmgen.plan.words import count_runs
from slurmgen.runtime_spec import FORMAT


def template_dir() -> str:
    """Templates ship inside the wheel as slurmgen/templates; a checkout keeps them in templates/.
    (os.path: render imports no pathlib, issue 43.)"""
    spec = importlib.util.find_spec("slurmgen.templates")
    for location in (spec.submodule_search_locations or []) if spec else []:
        if os.path.isfile(os.path.join(location, "job.sh.j2")):
            return location
    checkout = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
    return os.path.join(checkout, "templates")


_SAFE = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_@%+:./-")


# Words bash (and shellcheck) read as syntax even where an argument is expected.
_RESERVED = {"if", "then", "else", "elif", "fi", "case", "esac", "for", "select", "while", "until",
             "do", "done", "in", "function", "time", "coproc"}


def shell_quote(value) -> str:
    """One shell word for any value. Like shlex.quote, but ' \\ $ ` are escaped outside the single
    quotes ('a'\\''b', 'x'\\$): the same bytes for bash, and no shellcheck findings about them."""
    text = str(value)
    if text and set(text) <= _SAFE and text not in _RESERVED:
        return text
    # the text between the four escaped characters (even places), each quoted when not empty
    return "".join(("\\" + part if odd else f"'{part}'") for odd, part in _quoted_parts(text)) or "''"


_ESCAPED = re.compile(r"(['\\$`])")


def _quoted_parts(text: str):
    for place, part in enumerate(_ESCAPED.split(text)):
        if place % 2 or part:
            yield place % 2, part


def _unprintable(char: str) -> bool:
    """A character that is no text on one line: controls, line and paragraph separators, and the
    surrogates Python holds undecodable command-line bytes as."""
    return unicodedata.category(char) in ("Cc", "Cs", "Zl", "Zp")


def comment(text: str) -> str:
    """Keep a value on one comment line (a newline would start live shell code); every other
    character, non-ASCII included, stays as it is, so that the line can be pasted back."""
    return "".join(char.encode("unicode_escape", "backslashreplace").decode("ascii") if _unprintable(char)
                   else char for char in text)


def command_word(word: str) -> str:
    """A word of the script's `# Command:` line: shlex's quoting, or bash's $'...' for a word with a
    control character or undecodable bytes (those escaped byte by byte), so that the line, run,
    gives exactly the same arguments."""
    if not any(_unprintable(char) for char in word):
        return shlex.quote(word)
    out = []
    for char in word:
        if char in "\\'":
            out.append("\\" + char)
        elif _unprintable(char):
            out.extend(f"\\x{byte:02x}" for byte in char.encode("utf-8", "surrogateescape"))
        else:
            out.append(char)
    return "$'" + "".join(out) + "'"


def _bytecode_cache():
    """Compiled templates in the user's cache: render is run often on busy login nodes."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    directory = os.path.join(base, "slurmgen", f"jinja-{__version__}")
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError:
        return None
    return jinja2.FileSystemBytecodeCache(directory)


def sbatch_quote(value) -> str:
    """Quote a value for an #SBATCH line, which sbatch (not bash) parses: double quotes, with
    backslash escaping backslash and double quote inside them."""
    text = str(value)
    if text and all(c.isalnum() or c in "_.,:/+=@%[]-" for c in text):
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def output_pattern(log_dir: str, name: str = DEFAULT_LOG_NAME) -> str:
    """Slurm expands %-patterns in --output; a literal % in the directory is written %%."""
    return sbatch_quote(log_dir.replace("%", "%%") + "/" + name)


@functools.lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(template_dir()),
        bytecode_cache=_bytecode_cache(),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters["q"] = shell_quote
    env.filters["comment"] = comment
    env.filters["sq"] = sbatch_quote
    return env


def _component_options(spec, comp) -> list[tuple[str, object]]:
    """#SBATCH options of one component after its layout, in a fixed order: those Slurm applies
    per component on every one, job-wide ones on the first only; (name, None) is a flag."""
    first = comp.index == 0
    pairs = [("partition", comp.partition), ("account", spec.account), ("qos", spec.qos),
             ("time", spec.time), ("mem", comp.mem), ("mem-per-cpu", spec.mem_per_cpu),
             ("constraint", comp.constraint), ("exclude", spec.exclude), ("hint", spec.hint),
             ("threads-per-core", spec.threads_per_core)]
    if first:
        pairs += [("reservation", spec.reservation), ("mail-type", spec.mail_type),
                  ("mail-user", spec.mail_user), ("wait-all-nodes", 1 if spec.wait_all_nodes else None)]
    return [(key, value) for key, value in pairs if value] + sbatch_lines(spec.sbatch, first)


def _words(args) -> str:
    """Pass-through arguments as quoted words, each with a leading space."""
    return "".join(f" {shell_quote(arg)}" for arg in args)


_NO_PYTHON = {"torchrun": " --no-python", "accelerate": " --no_python", "srun": ""}


# The node's folder for the ranks' node-local beats (train.heartbeat: $TMPDIR, else /tmp): mounted into
# an image, so that the ranks there beat on the node and the hang watch outside reads the same files.
NODE_TMP = "${TMPDIR:-/tmp}"
# Known on the node only: the job's working directory and id, its temporary folder, left for the shell to expand.
_SHELL_VARS = ("$SLURM_SUBMIT_DIR", "$SLURM_JOB_ID", NODE_TMP)
# The rank hooks' package on the host (RANK_HOOKS_PACKAGE, environment.sh.j2), mounted read-only into an
# image, which need not hold slurmgen; only where the script found it, hence an entry of its own.
_HOOKS_MOUNT = '${RANK_HOOKS_PACKAGE:+,"$RANK_HOOKS_PACKAGE:$RANK_HOOKS_PACKAGE:ro"}'


def _quote_keeping_vars(value: str) -> str:
    """Shell-quote a value, except the _SHELL_VARS in it, which stay expandable."""
    for var in _SHELL_VARS:
        if var in value:
            return f'"{var}"'.join(_quote_keeping_vars(part) if part else "" for part in value.split(var))
    return shell_quote(value)


def _container_flags(spec) -> str:
    """pyxis flags for every srun; the values quoted, since paths may hold anything."""
    quoted = []
    flags = container_args(spec, "$SLURM_SUBMIT_DIR", spec.log_dir, name="slurmgen-$SLURM_JOB_ID", node_dir=NODE_TMP)
    for flag in flags:
        name, _, value = flag.partition("=")
        quoted.append(f"{name}={_quote_keeping_vars(value)}{_hooks_mount(spec, name == '--container-mounts')} ")
    return "".join(quoted)


def _container_exec(spec) -> str:
    """apptainer's words for every step's command, quoted like the pyxis flags."""
    words = container_exec(spec, "$SLURM_SUBMIT_DIR", spec.log_dir, node_dir=NODE_TMP)
    return "".join(f"{_quote_keeping_vars(word)}{_hooks_mount(spec, words[i - 1:i] == ['--bind'])} "
                   for i, word in enumerate(words))


def _hooks_mount(spec, mounts: bool) -> str:
    """After the list of mounts (or binds): the rank hooks' package, where the ranks run the user's code."""
    return _HOOKS_MOUNT if mounts and spec.container_image and spec.rank_hooks_on else ""


def _place(comp, spares: bool) -> dict:
    """The words of a launch line that say where its ranks go: the component's own, or with
    --spares where the job runtime puts each part (slurmgen.job.spares.Part: the function's
    arguments GROUP NODES FIRST_NODE_RANK FIRST_RANK NODELIST)."""
    if not spares:
        return {"group": comp.index, "nodes": comp.nodes, "tasks": comp.tasks, "first_node": comp.node_offset,
                "first_rank": comp.rank_offset, "machine": '"$SLURM_NODEID"', "env": "", "flags": "", "usage": ""}
    return {"group": '"$1"', "nodes": '"$2"',
            "tasks": '"$2"' if comp.tasks_per_node == 1 else f'"$(( $2 * {comp.tasks_per_node} ))"',
            "first_node": "SLURMGEN_FIRST_NODE", "first_rank": "SLURMGEN_FIRST_RANK",
            "machine": '"$(( SLURMGEN_FIRST_NODE + SLURM_NODEID ))"',
            "env": "SLURMGEN_FIRST_NODE=$3 SLURMGEN_FIRST_RANK=$4 ", "flags": ' --nodelist="$5" --overlap --mem=0',
            "usage": "  # GROUP NODES FIRST_NODE_RANK FIRST_RANK NODELIST: the job runtime's choice (--spares)"}


def run_length(counts) -> str:
    """1,1,2,2 -> 1(x2),2(x2): Slurm's own compact form, so 1024 nodes stay one short line."""
    return ",".join(str(c) if n == 1 else f"{c}(x{n})" for c, n in count_runs(counts))


def render(plan: Plan, command: str = "slurmgen render") -> str:
    spec = plan.spec
    by_prefix = bool(spec.nccl_socket_ifname and iface_prefixes(spec.nccl_socket_ifname))
    context = {
        "job": plan.facts,
        "plan": plan,
        "version": __version__,
        "command": command,
        "target": spec.target,
        # Which code runs, in the job log at every run's start (a requeue runs the same snapshot)
        "code_line": spec.code.log_line() if spec.code else "",
        "log_dir": spec.log_dir,
        "output_pattern": output_pattern(spec.log_dir, spec.log_name),
        "error_pattern": output_pattern(spec.log_dir, spec.error_name) if spec.error_log else "",
        "layout": run_length(spec.gpus),
        "het_flag": [f"--het-group={_place(c, bool(plan.spare))['group']} " if plan.heterogeneous else ""
                     for c in plan.components],
        "place": [_place(c, bool(plan.spare)) for c in plan.components],
        "component_names": [c.name for c in plan.components],
        "component_options": [_component_options(spec, c) for c in plan.groups],
        "srun_flags": _words(spec.srun_args),
        # Launcher flags after slurmgen's own; a program is started as it is, without Python.
        "launcher_flags": (_NO_PYTHON[spec.launcher] if spec.exec else "") + _words(spec.launcher_args),
        # Launch steps first take their own node's interface (the job runtime's node_iface).
        "node_setup": "node_iface || exit; " if by_prefix else "",
        "rank_python": "" if spec.exec else shell_quote(spec.python) + " ",
        "container_flags": _container_flags(spec),
        "container_exec": _container_exec(spec),
        # pyxis cannot mount a directory that does not exist yet
        "container_dirs": container_dirs(spec, spec.log_dir) if spec.container_image else [],
        "exports": rank_exports(spec),
        # OMP_NUM_THREADS, unless the user's --env sets it
        "threads": None if any(k == "OMP_NUM_THREADS" for k, _ in spec.env) else spec.threads_per_rank,
        "stop_wait": stop_wait(spec.grace),
        "dependency": dependency(spec.after),
        # Everything the job runtime needs, as the one record it reads
        "runtime_spec": runtime_spec(plan, model_path(spec)).to_json(),
        "runtime_format": FORMAT,
    }
    return environment().get_template("job.sh.j2").render(context)


def needs_submitter(plan: Plan) -> bool:
    """More than one sbatch: a sweep of het jobs (one per run), or a data prep job first."""
    return plan.spec.prep or (bool(plan.runs) and not plan.array)


def render_submitter(plan: Plan, script: str, prep_script: str = "") -> str:
    """The script that submits the job (absolute `script`): the prep job first, then the training
    job after it; a het sweep's runs at most N at once."""
    per_run = bool(plan.runs) and not plan.array
    prep = "afterok:${PREP}" if plan.spec.prep else ""
    waits = waits_for(len(plan.runs), plan.spec.max_parallel) if per_run else [None]
    deps = []
    for wait in waits:
        chain = "afterany:${JOBS[%d]}" % wait if wait is not None else ""
        value = dependency(plan.spec.after, ",".join(d for d in (chain, prep) if d))
        deps.append(f' --dependency="{value}"' if chain or prep else "")
    return environment().get_template("submit_sweep.sh.j2").render(
        plan=plan, version=__version__, script=script, prep_script=prep_script, dependencies=deps,
        per_run=per_run, most=min(plan.spec.max_parallel or len(plan.runs), len(plan.runs)))


def render_prep(plan: Plan) -> str:
    """--prep: the CPU-only job that prepares the data once (train.sft, SLURMGEN_PREPARE_ONLY)."""
    spec = plan.spec
    options = [(k, v) for k, v in _component_options(spec, plan.components[0])
               if k not in ("mem", "hint", "threads-per-core")]
    return environment().get_template("prep.sh.j2").render(
        job=plan.facts, version=__version__, output_pattern=output_pattern(spec.log_dir, spec.log_name),
        cpus=plan.components[0].cpus_per_task, options=options, exports=rank_exports(spec),
        container_dirs=[], dependency=dependency(spec.after))
