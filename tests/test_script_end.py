"""A rank's "ended" mark (train.script_end, issue 41) in real processes started as a job starts its
ranks (train/rank_hooks first on PYTHONPATH, no Slurm): a script that did its work and then died in
Python's exit leaves it, a script that failed never does; the job runtime's reading of the marks
(slurmgen.job.script_end) on the files real ranks wrote."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # train_fixtures, whatever the import mode
from train import rank_hooks  # noqa: E402
from train_fixtures import free_port, hf_cache, subprocess_env, torchrun_cmd  # noqa: E402,F401

from slurmgen.job.record import JobFiles  # noqa: E402
from slurmgen.job.script_end import every_rank_ended  # noqa: E402

# The real case's order: the work is done, every atexit handler has run, then C++ teardown aborts
# (gloo's threads destroyed in a destructor: "terminate called without an active exception").
# A C++ static destructor is registered with __cxa_atexit; so is this abort.
ABORT_AFTER_PYTHON = '''
import ctypes
libc = ctypes.CDLL(None)
libc.__cxa_atexit(ctypes.cast(libc.abort, ctypes.c_void_p), None, None)
'''


def run(tmp_path: Path, script: str, rank: str = "3") -> subprocess.CompletedProcess:
    (tmp_path / "script.py").write_text(script)
    env = subprocess_env(tmp_path, RANK=rank, SLURMGEN_HEARTBEAT_DIR=str(tmp_path / "beats"))
    env["PYTHONPATH"] = rank_hooks.DIR + ":" + env["PYTHONPATH"]
    return subprocess.run([sys.executable, "script.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=60)


def mark(tmp_path: Path, rank: str = "3") -> Path:
    return tmp_path / "beats" / f"ended-{rank}"


def test_a_script_that_ended_then_aborted_in_pythons_exit_leaves_its_mark(tmp_path):
    done = run(tmp_path, ABORT_AFTER_PYTHON + 'print("work done", flush=True)\n')
    assert done.returncode == -6 and "work done" in done.stdout  # SIGABRT after the end, as the real case
    assert mark(tmp_path).read_text().split()[0] == "3"


def test_a_script_that_ends_with_sys_exit_0_leaves_its_mark(tmp_path):
    done = run(tmp_path, 'import sys\nprint("ok")\nsys.exit(0)\n')
    assert done.returncode == 0 and done.stdout == "ok\n" and done.stderr == "" and mark(tmp_path).exists()


def test_a_non_zero_systemexit_the_script_caught_still_leaves_no_mark(tmp_path):
    """SystemExit stays itself to the script; one made with a non-zero code counts, even caught (the safe
    side: without the mark an abort at exit is a failure, as before)."""
    script = ('try:\n    raise SystemExit(2)\nexcept SystemExit as caught:\n'
              '    print(type(caught).__name__, isinstance(caught, SystemExit), caught.code)\nexit(0)\n')
    done = run(tmp_path, script)
    assert done.returncode == 0 and done.stdout == "SystemExit True 2\n" and done.stderr == ""
    assert not mark(tmp_path).exists()


def test_what_sys_exit_and_argparse_raise_is_still_caught_by_the_scripts_except_systemexit(tmp_path):
    """The noted SystemExit is the one `except SystemExit` names: sys.exit's (and argparse's, through it)
    is caught as before; the mark follows the codes made (0 and 0: marked)."""
    script = ("import sys, argparse\ntry:\n    sys.exit(0)\nexcept SystemExit as e:\n    print('caught', e.code)\n"
              "try:\n    argparse.ArgumentParser().parse_args(['-h'])\nexcept SystemExit as e:\n"
              "    print('caught', e.code)\nprint('end')\n")
    done = run(tmp_path, script)
    assert done.returncode == 0 and done.stdout.startswith("caught 0\nusage:"), done.stdout + done.stderr
    assert done.stdout.endswith("caught 0\nend\n") and mark(tmp_path).exists()


@pytest.mark.parametrize("ending, status", [
    ('raise ValueError("bad batch")', 1),
    ("import sys\nsys.exit(3)", 3),
    ("raise SystemExit(3)", 3),
    ("exit(3)", 3),
    ('raise SystemExit("a message: status 1")', 1),
    ('import sys\nsys.excepthook = lambda *exc: print("their hook")\nraise KeyError("k")', 1),  # a hook of their own
])
def test_a_script_that_failed_leaves_no_mark_even_if_it_then_aborts(tmp_path, ending, status):
    done = run(tmp_path, ABORT_AFTER_PYTHON + ending + "\n")
    assert done.returncode == -6  # the abort hides the status: only the mark's absence tells
    assert not mark(tmp_path).exists()
    done = run(tmp_path, ending + "\n")
    assert done.returncode == status and not mark(tmp_path).exists()


def test_an_abort_in_the_scripts_own_atexit_handler_comes_after_the_mark(tmp_path):
    """The mark is written once the main module ended and its threads were joined, before any atexit
    handler: one of the script's that aborts (or torch's) comes after it."""
    script = ("import atexit, os, threading, time\natexit.register(os.abort)\n"
              "threading.Thread(target=lambda: (time.sleep(1), print('thread done', flush=True))).start()\n")
    done = run(tmp_path, script)
    assert done.returncode == -6 and done.stdout == "thread done\n" and mark(tmp_path).exists()


def test_a_script_killed_in_its_own_thread_after_its_main_module_ended_leaves_no_mark(tmp_path):
    """A non-daemon thread still working when the main module ends (an upload, an async save) is part
    of the script: a crash there, before Python joined it, leaves no mark."""
    script = "import os, threading, time\nthreading.Thread(target=lambda: (time.sleep(1), os.abort())).start()\n"
    done = run(tmp_path, script)
    assert done.returncode == -6 and not mark(tmp_path).exists()


def test_a_mark_left_by_an_earlier_process_of_the_rank_is_removed_at_its_start(tmp_path):
    mark(tmp_path).parent.mkdir()
    mark(tmp_path).write_text("3 node1 1\n")
    assert run(tmp_path, 'import os\nos._exit(1)\n').returncode == 1
    assert not mark(tmp_path).exists()


def test_torchruns_ranks_mark_their_end_and_the_runtime_reads_every_rank(tmp_path, hf_cache):
    """Two ranks of a real gloo process group under torchrun: both marks, and the runtime's judgement
    on them (world size 2: every rank ended; a world of 3: one missing, a real failure)."""
    (tmp_path / "loop.py").write_text(
        "import torch, torch.distributed as dist\ndist.init_process_group('gloo')\n"
        "t = torch.ones(2)\ndist.all_reduce(t)\nprint('rank', dist.get_rank(), t.tolist(), flush=True)\n")
    env = subprocess_env(hf_cache, SLURMGEN_HEARTBEAT_DIR=str(tmp_path / "beats"))
    env["PYTHONPATH"] = rank_hooks.DIR + ":" + env["PYTHONPATH"]
    cmd = torchrun_cmd(2, "--master-addr", "127.0.0.1", "--master-port", str(free_port()), "loop.py")
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)
    # 0, or the very abort the marks are for (a loaded machine, CI run 32): a rank's SIGABRT in its
    # exit, after which torchrun TERMs the other
    aborted = re.search(r"exitcode\s*:\s*-6 .*\(SIGABRT\)", done.stderr)
    assert done.returncode == 0 or (done.returncode == 1 and aborted), done.stderr[-2000:]
    files = JobFiles(tmp_path)  # its beats folder is the heartbeat folder above
    assert every_rank_ended(files, 2) and not every_rank_ended(files, 3)
    assert sorted(p.name for p in (tmp_path / "beats").glob("ended-*")) == ["ended-0", "ended-1"]  # not the agent's


def test_pythons_the_rank_started_do_not_speak_for_it(tmp_path):
    """A spawned worker (a DataLoader's, with the spawn context) and a Python subprocess end well; the rank
    then fails: no mark. Neither removes the mark of a rank that ends well either."""
    script = ("import multiprocessing as mp, subprocess, sys\n"
              "def work():\n    print('worker done', flush=True)\n"
              "if __name__ == '__main__':\n"
              "    p = mp.get_context('spawn').Process(target=work)\n    p.start()\n    p.join()\n"
              "    subprocess.run([sys.executable, '-c', 'print(\"child done\")'], check=True)\n"
              "    import os\n    if os.environ.get('FAIL'):\n        raise RuntimeError('saving failed')\n")
    (tmp_path / "script.py").write_text(script)
    env = subprocess_env(tmp_path, RANK="3", SLURMGEN_HEARTBEAT_DIR=str(tmp_path / "beats"), FAIL="1")
    env["PYTHONPATH"] = rank_hooks.DIR + ":" + env["PYTHONPATH"]
    done = subprocess.run([sys.executable, "script.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 1 and done.stdout == "worker done\nchild done\n", done.stderr
    assert not mark(tmp_path).exists()
    del env["FAIL"]
    done = subprocess.run([sys.executable, "script.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0 and mark(tmp_path).read_text().split()[2] != ""  # the rank's own pid


def test_a_forked_child_that_exits_through_pythons_exit_does_not_mark_for_its_parent(tmp_path):
    script = ("import os, sys, time\nif os.fork() == 0:\n    sys.exit(0)\ntime.sleep(0.5)\n"
              "raise RuntimeError('the parent failed')\n")
    done = run(tmp_path, script)
    assert done.returncode == 1 and not mark(tmp_path).exists()
