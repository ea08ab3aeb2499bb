"""slurmgen.site.child_process: how render runs sinfo and bash -n without the subprocess module
(issue 43): output read whole, a program that does not answer killed at the deadline, a reader that
stops early no fault, a missing program an OSError the callers turn into "no answer"."""
import os
import shutil
import time

import pytest

from slurmgen.site import limits
from slurmgen.site.child_process import Child
from slurmgen.site.shell_syntax import Parse, bash_error

pytestmark = [pytest.mark.unit, pytest.mark.machine_vetting]  # limits.Asking itself


def test_its_output_is_read_whole_past_a_pipes_buffer():
    child = Child(["head", "-c", "300000", "/dev/zero"])
    assert (len(child.finish()), child.returncode) == (300000, 0)
    assert child.finish() == b"\0" * 300000  # read once, kept


def test_stderr_is_read_and_stdout_dropped_when_asked():
    child = Child(["sh", "-c", "echo out; echo err >&2; exit 3"], read=2)
    assert (child.finish(), child.returncode) == (b"err\n", 3)


def test_a_program_past_its_deadline_is_killed_and_reaped():
    child = Child(["sleep", "30"])
    start = time.monotonic()
    assert child.finish(0.3) is None
    assert time.monotonic() - start < 5 and child.returncode == -9


def test_a_missing_program_is_an_oserror_and_sinfo_missing_is_no_answer(monkeypatch, tmp_path):
    with pytest.raises(FileNotFoundError):
        Child(["slurmgen-no-such-program"])
    monkeypatch.setenv("PATH", str(tmp_path))
    assert limits.Asking().nodes() is None
    assert Parse("fi\n").error() is None  # no bash here: it parses


def test_sinfo_that_does_not_answer_is_no_answer_within_the_wait(monkeypatch, tmp_path):
    (tmp_path / "sinfo").write_text("#!/bin/sh\nexec sleep 30\n")
    (tmp_path / "sinfo").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    monkeypatch.setattr(limits, "WAIT_SECONDS", 0.3)
    asking = limits.Asking()
    assert asking.nodes() is None and asking.sinfo.returncode == -9


def test_a_megabyte_of_script_is_parsed_and_its_error_said_at_its_own_line():
    """The whole text through the pipe (a bash that stopped reading early would be no fault either),
    bash's line numbers those of the text, not of the `set -n` put before it."""
    error = bash_error("fi\n" + "# filler\n" * 120000)
    assert error == "line 1: syntax error near unexpected token `fi'"
    assert bash_error("echo 'fine'\n" + "# filler\n" * 120000) is None
    assert bash_error("echo a\necho b\nfi\n") == "line 3: syntax error near unexpected token `fi'"


def test_the_parse_runs_no_line_of_the_script_nor_the_users_bash_env(tmp_path, monkeypatch):
    """bash parses as `bash -n` does: nothing of the text runs (`set +n` and `exec` included), and a
    BASH_ENV (a site's module init, which a plain non-interactive bash sources) is not sourced."""
    marks = [tmp_path / name for name in ("plain", "after-set+n", "substituted", "exec", "bash-env")]
    (tmp_path / "env.sh").write_text(f"touch {marks[4]}\n")
    monkeypatch.setenv("BASH_ENV", str(tmp_path / "env.sh"))
    text = f"touch {marks[0]}\nset +n\ntouch {marks[1]}\necho $(touch {marks[2]})\nexec touch {marks[3]}\n"
    assert bash_error(text) is None
    assert [mark.name for mark in marks if mark.exists()] == []


def test_where_dot_cannot_open_dev_stdin_the_text_goes_to_bash_n(tmp_path, monkeypatch):
    """A machine without /proc (no /dev/stdin to open): bash's `.` fails with status 1, and the same
    text is parsed by `bash -n`, with the same verdicts and line numbers, and still runs nothing."""
    calls = tmp_path / "calls"
    (tmp_path / "bash").write_text(f"#!/bin/sh\nprintf '%s\\n' \"$*\" >> {calls}\n"
                                   f"[ \"$1\" = -c ] && exec {shutil.which('bash')} -c '. /dev/no-stdin-here'\n"
                                   f"exec {shutil.which('bash')} \"$@\"\n")
    (tmp_path / "bash").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    assert bash_error("echo a\nfi\n") == "line 2: syntax error near unexpected token `fi'"
    assert bash_error(f"touch {tmp_path / 'ran'}\n") is None and not (tmp_path / "ran").exists()
    assert calls.read_text().splitlines() == ["-c . /dev/stdin", "-n"] * 2


def test_a_child_read_through_a_descriptor_past_1024():
    """A host process with many files open (a notebook, a server) gets pipes past select()'s 1024."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 1100:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 2048), hard))  # root, or a hard limit above it
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        child = Child(["echo", "far"])
        assert child.out > 1024
        assert (child.finish(5), child.returncode) == (b"far\n", 0)
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
