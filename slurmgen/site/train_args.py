"""The training arguments of slurmgen's own entry points, judged before the queue wait. A missing model
costs nothing to see: `render` warns, `check` fails, `submit` refuses. `-- --max_stepz 100` or
`--learning_rate abc` are judged by the entry point's own parser (train.args_check, TRL's or
transformers'), which imports torch: seconds. `check` and `render --check` run it each time (an
accepted command line is remembered in ~/.cache/slurmgen until the entry point or the libraries
change); it also leaves the parser's option list there, against which a plain `render`, `submit` or
`slurmgen.Job` parses in milliseconds (site/train_options.py). The first of those with a new Python,
TRL or transformers runs the parser itself, once."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import sys
from typing import Optional

from slurmgen.plan.spec import SHIPPED_MODULES
from slurmgen.plan.words import train_arg
from slurmgen.site.train_tools import ROOT, tool_command

MODEL_FLAGS = ("--model_name_or_path", "--model-name-or-path")


def _stamp(module: str) -> str:
    """What a verdict depends on besides the arguments: this Python, the entry point and its checker,
    and the installed TRL, transformers and torch (their files' times)."""
    files = [os.path.join(ROOT, *module.split(".")) + ".py", os.path.join(ROOT, "train", "args_check.py")]
    for name in ("trl", "transformers", "torch"):
        try:
            found = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            found = None
        files.append(found.origin if found and found.origin else "")
    return "\n".join([sys.executable, *(f"{f}:{os.stat(f).st_mtime_ns if os.path.exists(f) else ''}" for f in files)])


def _cache_path(module: str, lists: list, stamp: str) -> str:
    """Where an accepted command line is remembered (stamp: _stamp(module), read once a check)."""
    key = hashlib.sha256(f"{stamp}\n{module}\n{json.dumps(lists)}".encode("utf-8", "surrogateescape"))
    return os.path.join(_cache_dir(), key.hexdigest())


def _options_path(module: str, stamp: str) -> str:
    """Where the module's option list is kept for these libraries (train.args_check writes it)."""
    return os.path.join(_cache_dir(), "options-" + hashlib.sha256(f"{stamp}\n{module}".encode()).hexdigest())


def _cache_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "slurmgen", "train-args")


def _remember(path: str, text: str = "") -> None:
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as out:
            out.write(text)
    except OSError:
        pass  # a read-only home: checked again next time


class ArgsCheck:
    """One parse of a job's training arguments (one list per run of a sweep) by the entry point's own
    parser, in the background; it leaves the parser's option list in the cache too."""

    def __init__(self, module: str, lists: list[list[str]], stamp: Optional[str] = None):
        stamp = _stamp(module) if stamp is None else stamp
        self.module, self.cached, self.proc = module, _cache_path(module, lists, stamp), None
        if os.path.exists(self.cached):
            return
        self.options = _options_path(module, stamp)
        try:
            os.makedirs(os.path.dirname(self.options), exist_ok=True)
        except OSError:
            self.options = None  # a read-only home: no list kept, the parse still runs
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error"}
        arg = json.dumps(lists, ensure_ascii=True)  # undecodable bytes (surrogates) travel as \\u escapes
        import subprocess  # here: a render whose arguments were checked before imports none (issue 43)

        self.proc = subprocess.Popen(tool_command("train.args_check", [module, arg, *filter(None, [self.options])]),
                                     stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)

    def verdict(self) -> tuple[str, bool]:
        """(line, refused): the parser's refusal (refused), or a line saying the arguments were not
        checked and why; ("", False) when they parse (or did before)."""
        if self.proc is None:
            return "", False
        out, err = (b.decode(errors="replace") for b in self.proc.communicate())
        refused = [line[len("error: "):] for line in out.splitlines() if line.startswith("error: ")]
        if self.proc.returncode == 2 and refused:
            return f"training arguments for {self.module}: {refused[0]} (its own parser's verdict)", True
        if self.proc.returncode != 0:
            why = ([line for line in err.splitlines() if line.strip()] or [f"exit status {self.proc.returncode}"])[-1]
            return (f"training arguments not checked: {self.module}'s parser cannot run here"
                    f" ({why.split(': ', 1)[-1]}; pip install 'slurmgen[train]')"), False
        _remember(self.cached)
        return "", False

    def parser_missing(self) -> bool:
        """The parser could not even be built here (no TRL): no option list was written."""
        return (self.proc is not None and self.options is not None and self.proc.returncode not in (0, 2)
                and not os.path.exists(self.options))


class QuickCheck:
    """A plain render's or submit's parse: against the option list the parser left in the cache, in
    milliseconds; the parser itself where there is no list yet for these libraries (seconds, once)."""

    def __init__(self, module: str, lists: list[list[str]]):
        self.module, self.full, self.found = module, None, ("", False)
        stamp = _stamp(module)  # find_spec and stat of the libraries: once for every path below
        if os.path.exists(_cache_path(module, lists, stamp)):
            return  # accepted before
        self.options = _options_path(module, stamp)
        listing = _read_listing(self.options)
        if listing is None:
            self.full = ArgsCheck(module, lists, stamp)
        elif "cannot_run" in listing:
            self.found = listing["cannot_run"], False
        else:
            from slurmgen.site.train_options import first_refusal

            refusal = first_refusal(listing, lists)
            if refusal:
                self.found = f"training arguments for {module}: {refusal} (its own parser's verdict)", True

    def ran_parser(self) -> bool:
        """The parser itself ran (no option list yet for these libraries): seconds a user waited."""
        return self.full is not None and self.full.proc is not None

    def verdict(self) -> tuple[str, bool]:
        """As ArgsCheck.verdict."""
        if self.full is None:
            return self.found
        line, refused = self.full.verdict()
        if self.full.parser_missing():  # later renders say so without trying again, until the libraries change
            _remember(self.options, json.dumps({"cannot_run": line}))
        return line, refused


def _read_listing(path: str) -> Optional[dict]:
    try:
        with open(path) as found:
            return json.load(found)
    except (OSError, ValueError):
        return None


def missing_model(spec, runs=()) -> str:
    """The line for a shipped entry point's command line without a model (every one loads a model, so
    every rank would stop after the queue wait), or "". TRL's --config file may name it (train.sft)."""
    name, lists = _shipped(spec, runs)
    if not name:
        return ""
    for argv in lists:
        if train_arg(argv, *MODEL_FLAGS) is None and not (name == "train.sft" and train_arg(argv, "--config")):
            return (f"no model: {name} would fail on every rank after the queue wait; give one after --, e.g."
                    " -- --model_name_or_path Qwen/Qwen2.5-0.5B")
    return ""


def _shipped(spec, runs=()) -> tuple[str, list[list[str]]]:
    """(module, one argument list per run) for an entry point slurmgen ships; ("", []) for any other
    target (a user's module, script or program parses its own)."""
    kind, name = spec.target
    if kind != "module" or name not in SHIPPED_MODULES:
        return "", []
    return name, [list(run.train_args) for run in runs] or [list(spec.train_args)]


def start(spec, runs=(), full: bool = True):
    """The parse of a job's training arguments, started (full: by the parser itself, as `check` does;
    else against its option list); None for a target slurmgen does not ship."""
    name, lists = _shipped(spec, runs)
    if not name:
        return None
    return ArgsCheck(name, lists) if full else QuickCheck(name, lists)
