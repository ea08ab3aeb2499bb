"""Issue 43: no value of any render option ends in a traceback. A property over every option render
shows, with hostile values (huge, negative, empty, non-ASCII, control characters, paths that are files,
directories, missing or impossible): render either writes its files (exit 0) or refuses with one line
on stderr and exit 2, leaving nothing behind. In-process (click's runner), at least 2,000 inputs.

Not drawn: --offline (it fetches from the hub), --check and --gpus auto (they ask the cluster), and -o
or --log-dir paths outside the example's own directory other than impossible ones (they would write
there)."""
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurmgen.options import ENTRIES
from slurmgen.plan.option_fields import RENDER

pytestmark = pytest.mark.unit
EXAMPLES = int(os.environ.get("SLURMGEN_FUZZ_EXAMPLES", "2000"))
SKIPPED = {"--offline"}
FIXTURES = Path(tempfile.mkdtemp(prefix="slurmgen-hostile-"))  # paths that are files, directories, unreadable
(FIXTURES / "file.txt").write_text("print('hi')\n")
(FIXTURES / "dir").mkdir()
(FIXTURES / "binary").write_bytes(b"\xff\xfe\x00\x80")
(FIXTURES / "secret.py").write_text("x = 1\n")
(FIXTURES / "secret.py").chmod(0)

TEXTS = st.one_of(
    st.sampled_from(["", " ", "-", "--", "0", "-1", "1e308", "nan", "inf", "9" * 40, "9" * 5000, "²", "٣", "jöb-名前",
                     "a\nb", "a\rb", "a\tb", "\x01", "\x1b[31m", "\u2028", "\ufeff", "'", '"', "`id`", "$(id)", "a b",
                     "%", "%q", "node[1-99999999]", "node[1-2]", "n[", ",", "1,,2", "8x0", "0x8", "1:2:3:4",
                     "UNLIMITED", "a=b", "=b", "KEY=", "apptainer:img.sif", "apptainer:", "pyxis:", "docker://x",
                     str(FIXTURES / "file.txt"), str(FIXTURES / "dir"), str(FIXTURES / "secret.py"),
                     str(FIXTURES / "binary"),
                     "/proc/nope", "/etc/passwd/x", "missing/x", "~", "."]),
    st.text(min_size=0, max_size=12),
    st.text(alphabet=st.characters(codec="utf-8"), min_size=1, max_size=6),
    st.integers(min_value=-(10 ** 30), max_value=10 ** 30).map(str),
)
# Where a drawn path could write outside the example's directory: relative or impossible ones only.
LOCAL_PATHS = st.sampled_from(["job.sh", "sub/job.sh", "-", "dir", "/proc/nope/job.sh", "/etc/passwd/x/job.sh", "",
                               "ö.sh", "a\nb.sh", "missing/job.sh", "."])
LOG_DIRS = st.sampled_from(["logs", "/proc/nope", "/etc/passwd/x", "", "a\nb", "ö", "x/../../y", "%j", "dir",
                            str(FIXTURES / "file.txt"), str(FIXTURES / "file.txt") + "/x"])


def _flags() -> list:
    found = [("-o", LOCAL_PATHS, False), ("--show-config", None, False)]
    for entry in ENTRIES:
        flag = entry.option.flags[0].split("/")[0]
        if RENDER not in entry.option.commands or flag in SKIPPED:
            continue
        if entry.kind is bool:
            pair = entry.option.flags[0].split("/")
            found.append((st.sampled_from(pair), None, False))
        else:
            values = LOG_DIRS if flag == "--log-dir" else TEXTS.filter(lambda v: v.lower() != "auto")
            found.append((flag, values, entry.kind is list))
    return found


FLAGS = _flags()


@st.composite
def command_lines(draw):
    args = []
    for flag, values, repeat in draw(st.lists(st.sampled_from(FLAGS), min_size=1, max_size=5)):
        flag = draw(flag) if not isinstance(flag, str) else flag
        if values is None:
            args.append(flag)
            continue
        for _ in range(draw(st.integers(1, 2)) if repeat else 1):
            args += [flag, draw(values)]
    if draw(st.booleans()):
        args += ["--", *draw(st.lists(TEXTS, max_size=3))]
    return args


def test_every_option_drawn_is_covered():
    drawn = {f if isinstance(f, str) else "bool" for f, _, _ in FLAGS}
    shown = {e.option.flags[0].split("/")[0] for e in ENTRIES if RENDER in e.option.commands and e.kind is not bool}
    assert shown - SKIPPED <= drawn


@settings(max_examples=EXAMPLES, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(args=command_lines())
def test_no_value_ends_in_a_traceback(args, render_args, tmp_path):
    work = Path(tempfile.mkdtemp(dir=tmp_path))
    (work / "dir").mkdir()
    here = os.getcwd()
    os.chdir(work)
    try:
        result = render_args("render", *args)
    except BaseException as err:  # catch_exceptions=False: a traceback surfaces here
        pytest.fail(f"render {args!r} raised {type(err).__name__}: {err}")
    finally:
        os.chdir(here)
    left = sorted(p.name for p in work.iterdir())
    shutil.rmtree(work, ignore_errors=True)
    assert "Traceback" not in result.output, args
    if result.exit_code == 0:
        return
    assert result.exit_code == 2, (args, result.exit_code, result.output)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("slurmgen: error: "), (args, result.stderr)
    assert left == ["dir"], (args, left)  # nothing written by a refused render


def teardown_module():
    (FIXTURES / "secret.py").chmod(0o600)
    shutil.rmtree(FIXTURES, ignore_errors=True)
