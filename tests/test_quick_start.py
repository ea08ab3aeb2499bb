"""What keeps a command's start quick (issue 43, bench/render_speed.py measures it): records declared
with @frozen behave as @dataclass(frozen=True) ones but compile no code; short flags are given to
click as the long ones; a quick command's process ends without the interpreter's teardown, but only
where nothing waits for it; the command's own process freezes its imports rather than
collecting them."""
import dataclasses
import os
import pickle
import subprocess
import sys
from typing import Optional

import pytest

from slurmgen import __version__
from slurmgen.frozen_records import frozen
from slurmgen.job_commands import render_command
from slurmgen.long_flags import long_flags

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclasses.dataclass(frozen=True)
class Part:
    name: str
    nodes: int
    sizes: tuple[int, ...] = (1, 2)
    note: Optional[str] = None


Reference = Part


@frozen
class Part:  # noqa: F811  (the same declaration, as a record; its qualname is the same)
    name: str
    nodes: int
    sizes: tuple[int, ...] = (1, 2)
    note: Optional[str] = None


Record = Part


def outcome(action):
    try:
        return "ok", action()
    except Exception as err:  # the same exception and message as dataclass's, or near it
        return type(err).__name__, str(err).replace("__init__()", "()")


@pytest.mark.parametrize("build", [
    lambda cls: cls("a", 2), lambda cls: cls("a", 2, (4,), "n"), lambda cls: cls(nodes=3, name="b"),
    lambda cls: cls("a"), lambda cls: cls("a", 2, (1,), "n", 5), lambda cls: cls("a", name="b"),
    lambda cls: cls("a", 2, colour="red"),
])
def test_a_record_is_built_checked_and_shown_as_a_frozen_dataclass(build):
    ours, theirs = outcome(lambda: build(Record)), outcome(lambda: build(Reference))
    assert ours[0] == theirs[0]
    if ours[0] == "ok":
        assert (repr(ours[1]), dataclasses.asdict(ours[1]), ours[1].__dict__) == (
            repr(theirs[1]), dataclasses.asdict(theirs[1]), theirs[1].__dict__)
    else:  # the message names the same argument
        assert ours[1].split()[-1] == theirs[1].split()[-1]


def test_a_record_is_frozen_compared_hashed_replaced_and_pickled_as_a_dataclass():
    a, same, other = Record("a", 2), Record("a", 2), Record("a", 3)
    assert (a == same, a != other, hash(a) == hash(same), a == Reference("a", 2)) == (True, True, True, False)
    for action in (lambda: setattr(a, "nodes", 5), lambda: delattr(a, "nodes"), lambda: setattr(a, "new", 1)):
        with pytest.raises(dataclasses.FrozenInstanceError):
            action()
    assert a.nodes == 2 and "new" not in a.__dict__
    assert dataclasses.replace(a, nodes=7) == Record("a", 7) and a.nodes == 2
    assert [f.name for f in dataclasses.fields(Record)] == ["name", "nodes", "sizes", "note"]
    assert pickle.loads(pickle.dumps(a)) == a


def test_a_record_compiles_no_code_and_eq_false_compares_by_identity(monkeypatch):
    compiled = []
    real = dataclasses._create_fn
    monkeypatch.setattr(dataclasses, "_create_fn", lambda name, *args, **kw: compiled.append(name) or real(name, *args, **kw))

    @frozen(eq=False)
    class Option:
        flags: tuple[str, ...]
        help: str = ""

    dataclasses.dataclass(frozen=True)(type("Check", (), {"__annotations__": {"x": "int"}}))
    assert sorted(compiled) == ["__delattr__", "__eq__", "__hash__", "__init__", "__repr__", "__setattr__"]  # dataclass's
    one, two = Option(("-x",)), Option(("-x",))
    assert one != two and len({one, two}) == 2 and repr(one).startswith("<")


def test_a_record_refuses_what_its_init_does_not_do():
    with pytest.raises(TypeError, match="plain fields"):
        @frozen
        class Listed:
            items: list = dataclasses.field(default_factory=list)


@pytest.mark.parametrize("args, expected", [
    (["--nodes", "4", "-G", "1,1,2,2", "-o", "job.sh"], ["--nodes", "4", "--gpus", "1,1,2,2", "--output", "job.sh"]),
    (["-J", "-o", "-o", "x", "--", "-o", "y"], ["--job-name", "-o", "--output", "x", "--", "-o", "y"]),
    (["--exclusive", "-w", "node1", "--job-name=-o"], ["--exclusive", "--nodelist", "node1", "--job-name=-o"]),
    (["-N4", "-ojob.sh", "train.py"], ["-N4", "-ojob.sh", "train.py"]),  # attached values: click's own reading
    (["-o"], ["-o"]),  # no value: click's message names the flag as typed
])
def test_short_flags_are_given_to_click_as_the_long_ones(args, expected):
    assert long_flags(render_command, args) == expected


def slurmgen(*args, code="import slurmgen.cli; slurmgen.cli.main()", cwd=None):
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, "PYTHONPATH": ROOT})


def test_short_and_long_flags_write_the_same_script_and_refuse_alike(tmp_path):
    short = slurmgen("render", "-N", "2", "-G", "1", "-J", "x", "-o", "-", cwd=tmp_path)
    long = slurmgen("render", "--nodes", "2", "--gpus", "1", "--job-name", "x", "--output", "-", cwd=tmp_path)
    assert short.returncode == long.returncode == 0 and short.stdout == long.stdout
    missing = slurmgen("render", "-o", cwd=tmp_path)
    assert (missing.returncode, missing.stderr) == (2, "slurmgen: error: Option '-o' requires an argument.\n")


# Each object left at exit says so when the interpreter's teardown frees it.
TEARDOWN = ("import sys, atexit; import slurmgen.cli\n"
            "class Left:\n    def __del__(self): print('teardown ran', flush=True)\n"
            "sys.modules['slurmgen.cli'].left = Left()\n{hook}slurmgen.cli.main()")


@pytest.mark.parametrize("hook, teardown", [
    ("", False),  # nothing waits: the process ends at once
    ("atexit.register(lambda: print('hook ran', flush=True))\n", True),  # an atexit hook waits
])
def test_a_quick_command_skips_the_teardown_only_where_nothing_waits_for_it(tmp_path, hook, teardown):
    for args, status in (["render", "-N", "1", "-o", "-"], 0), (["render", "-N", "0"], 2):
        run = slurmgen(*args, code=TEARDOWN.format(hook=hook), cwd=tmp_path)
        assert run.returncode == status
        assert ("teardown ran" in run.stdout, "hook ran" in run.stdout) == (teardown, teardown)
        if status == 0:  # what was written is all there, though the process ended before the teardown
            assert run.stdout.startswith("#!/bin/bash\n") and "\nrun_job component_0\n" in run.stdout
    # a long-running command ends as Python ends
    assert "teardown ran" in slurmgen("status", "--help", code=TEARDOWN.format(hook="")).stdout


# Whether click's objects are among those the collector walks (not frozen), said at the end.
WALKED = ("import gc, sys, atexit\n"
          "atexit.register(lambda: print('click walked', any(o is vars(sys.modules['click.core'])\n"
          "                                                  for o in gc.get_objects()), flush=True))\n{entry}")


def test_the_commands_process_freezes_its_imports_and_a_library_keeps_its_collections():
    """The console script (slurmgen.__main__) marks its process as the command before click is
    imported: click's objects are frozen, never walked (one collection of them all was ~2 ms of a
    render); imported as a library, slurmgen freezes nothing and collects as Python does."""
    command = slurmgen("--version", code=WALKED.format(entry="import slurmgen.__main__ as m; m.main()"))
    assert command.stdout.splitlines() == [f"slurmgen, version {__version__}", "click walked False"]
    library = slurmgen("--version", code=WALKED.format(entry="import slurmgen.cli as m; m.main()"))
    assert library.stdout.splitlines() == [f"slurmgen, version {__version__}", "click walked True"]
    module = subprocess.run([sys.executable, "-m", "slurmgen", "--version"], capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": ROOT})
    assert module.stdout == f"slurmgen, version {__version__}\n"
