"""The rank hooks (train/rank_hooks, issue 26) in plain scripts that import neither slurmgen nor
train, started the way a job starts its ranks: train/rank_hooks first on PYTHONPATH."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # train_fixtures, whatever the import mode
from train import rank_hooks  # noqa: E402
from train_fixtures import free_port, hf_cache, subprocess_env, tiny  # noqa: E402,F401

LOOP = '''
import sys
import time
print("torch imported before the script:", "torch" in sys.modules, flush=True)
import torch

model = torch.nn.Linear(4, 1)
first, second = torch.optim.SGD(model.parameters(), lr=0.1), torch.optim.AdamW(model.parameters())
began = time.monotonic()
for step in range(7):
    for opt in (first, second) if step < 2 else (first,):
        opt.zero_grad()
        model(torch.randn(2, 4)).sum().backward()
        opt.step()
print("loop seconds", time.monotonic() - began, flush=True)
import train  # the user's own train.py, beside this script
print("train is", train.__file__, train.WHOSE, flush=True)
'''


def hooked_env(hf_cache, tmp_path, *more_paths, **extra):
    path = [rank_hooks.DIR, *map(str, more_paths)]
    env = subprocess_env(hf_cache, **extra)
    env["PYTHONPATH"] = ":".join([*path, env["PYTHONPATH"]])
    env["SLURMGEN_HEARTBEAT_DIR"] = str(tmp_path / "beats")
    return env


def beat(tmp_path: Path, rank: int = 0) -> list[str]:
    return (tmp_path / "beats" / f"rank-{rank}").read_text().split()


def test_a_plain_loop_beats_at_every_optimizer_step(hf_cache, tmp_path):
    """Every step of every optimizer beats; torch is not imported before the script; a user's own
    `train` module stays theirs; a sitecustomize the user already had still runs."""
    work, theirs = tmp_path / "work", tmp_path / "site"
    work.mkdir()
    theirs.mkdir()
    (work / "loop.py").write_text(LOOP)
    (work / "train.py").write_text("WHOSE = 'the user'\n")
    (theirs / "sitecustomize.py").write_text("import sys\nprint('their sitecustomize ran', file=sys.stderr)\n")
    run = subprocess.run([sys.executable, "loop.py"], cwd=work, capture_output=True, text=True, timeout=120,
                         env=hooked_env(hf_cache, tmp_path, theirs, RANK="0", SLURMGEN_BEAT_SECONDS="0"))
    assert run.returncode == 0, run.stderr
    assert "torch imported before the script: False" in run.stdout
    assert f"train is {work / 'train.py'} the user" in run.stdout, run.stdout
    assert "their sitecustomize ran" in run.stderr
    rank, step, _, host, pid = beat(tmp_path)
    assert (rank, step) == ("0", "9")  # 2 x 2 steps of two optimizers, then 5 of one
    assert (tmp_path / "beats" / "stack-0").exists()  # the hang watch's stack dump is registered


def test_with_the_straggler_watch_the_beat_carries_the_loops_compute_time(hf_cache, tmp_path):
    """SLURMGEN_STRAGGLER_WINDOW (the job runtime sets it): the same plain loop's forward passes are
    timed, and once 5 optimizer steps filled the window each beat carries their mean."""
    (tmp_path / "train.py").write_text("WHOSE = 'the user'\n")
    (tmp_path / "loop.py").write_text(LOOP)
    run = subprocess.run([sys.executable, "loop.py"], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                         env=hooked_env(hf_cache, tmp_path, RANK="0", SLURMGEN_BEAT_SECONDS="0",
                                        SLURMGEN_STRAGGLER_WINDOW="5"))
    assert run.returncode == 0, run.stderr
    rank, step, _, _, _, word, seconds = beat(tmp_path)
    loop = float(run.stdout.split("loop seconds ")[1].split()[0])
    # a mean of forward passes inside the loop: more than nothing, less than the whole loop took
    assert (rank, step, word) == ("0", "9", "compute") and 0 < float(seconds) < loop, (beat(tmp_path), loop)


def test_not_a_rank_and_hooks_off_write_nothing(hf_cache, tmp_path):
    """torchrun's agent (no RANK) gets no stack file; without the heartbeat folder nothing is written."""
    (tmp_path / "train.py").write_text("WHOSE = 'the user'\n")
    (tmp_path / "loop.py").write_text(LOOP)
    run = subprocess.run([sys.executable, "loop.py"], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                         env=hooked_env(hf_cache, tmp_path))
    assert run.returncode == 0, run.stderr
    assert not (tmp_path / "beats").exists()
    # Nor does such a process import any of slurmgen's train modules (28 ms each time).
    probe = "import sitecustomize, torch.optim, transformers.trainer; print(sorted(sitecustomize._ours))"
    for rank in (None, "0"):
        env = hooked_env(hf_cache, tmp_path, **({"RANK": rank} if rank else {}))
        run = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True,
                             timeout=120, env=env)
        assert run.returncode == 0, run.stderr
        hooked = {"train.script_hooks", "train.trainer_hooks"} <= set(ast.literal_eval(run.stdout))
        assert hooked == bool(rank) and (rank or run.stdout == "[]\n"), run.stdout
    env = hooked_env(hf_cache, tmp_path, RANK="0")
    del env["SLURMGEN_HEARTBEAT_DIR"]
    run = subprocess.run([sys.executable, "loop.py"], cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env)
    assert run.returncode == 0 and run.stderr == "", run.stderr


@pytest.mark.timeout(300)
def test_a_trainer_script_checkpoints_at_the_stop_file_and_resumes(tiny, hf_cache, tmp_path):
    """Seed 000's script (its TRL names fixed): at the stop file it saves a complete checkpoint at the
    current step and says "stopped"; run again with SLURMGEN_RESUME=auto it resumes from there and
    finishes; progress.jsonl has the loss and the learning rate."""
    from tests.test_script_check import adapted_seed_source

    out = tmp_path / "run"
    script = tmp_path / "train.py"
    script.write_text(adapted_seed_source(tiny, out, "max_steps=5, save_steps=100, logging_steps=1"))
    stop_file, outcome = tmp_path / "stop", tmp_path / "outcome"
    stop_file.touch()
    env = hooked_env(hf_cache, tmp_path, SLURMGEN_STOP_FILE=str(stop_file), SLURMGEN_OUTCOME_FILE=str(outcome),
                     RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                     MASTER_PORT=str(free_port()))  # one rank as torchrun starts it
    first = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True,
                           timeout=240, env=env)
    assert first.returncode == 0, first.stderr[-3000:]
    assert outcome.read_text() == "stopped 1\n"
    assert (out / "checkpoint-1" / "slurmgen_complete").is_file()
    assert (tmp_path / "beats" / "stoppable").exists()
    stop_file.unlink()
    second = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True,
                            timeout=240, env={**env, "SLURMGEN_RESUME": "auto"})
    assert second.returncode == 0, second.stderr[-3000:]
    assert f"resuming from {out / 'checkpoint-1'}" in second.stdout, second.stdout[-3000:]
    assert outcome.read_text() == "finished 5\n"
    lines = [json.loads(line) for line in (out / "progress.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [1, 2, 3, 4, 5]
    assert all(line["loss"] > 0 and line["learning_rate"] > 0 for line in lines[:-1]), lines
    assert beat(tmp_path)[1] == "5"


def test_the_submit_path_installs_the_same_hooks_in_its_task_process(hf_cache, tmp_path):
    """python -m slurmgen.submit runs a script inside its task process (runpy): the hooks are
    installed there; a program (--exec) gets them through PYTHONPATH."""
    code = (
        "import os, sys\n"
        "from slurmgen.submit.task import install_rank_hooks\n"
        "env = {}\n"
        "install_rank_hooks(env, 'exec')\n"
        "print('exec PYTHONPATH', env['PYTHONPATH'])\n"
        "install_rank_hooks(os.environ, 'script')\n"
        "assert 'torch' not in sys.modules\n"
        "import torch\n"
        "m = torch.nn.Linear(2, 1); o = torch.optim.SGD(m.parameters(), lr=0.1)\n"
        "for _ in range(3):\n"
        "    o.zero_grad(); m(torch.ones(1, 2)).sum().backward(); o.step()\n"
    )
    env = subprocess_env(hf_cache, RANK="0", SLURMGEN_HEARTBEAT_DIR=str(tmp_path / "beats"), SLURMGEN_BEAT_SECONDS="0")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert run.returncode == 0, run.stderr
    assert f"exec PYTHONPATH {rank_hooks.DIR}\n" in run.stdout
    assert beat(tmp_path)[1] == "3"


def test_watch_shows_the_step_of_rank_0s_beat_when_there_is_no_progress_file(tmp_path):
    """A script without progress.jsonl: `slurmgen watch` takes the step from rank 0's heartbeat
    beside the job log (what the rank hooks write)."""
    from slurmgen.observe.watch import beat_progress, progress_line

    records = [{"JobId": "77", "StdOut": str(tmp_path / "slurmgen-77.out")}]
    assert beat_progress(records) is None
    (tmp_path / ".slurmgen-77" / "beats").mkdir(parents=True)
    (tmp_path / ".slurmgen-77" / "beats" / "rank-0").write_text("0 42 1796424631.029 node1 7806\n")
    assert progress_line("RUNNING", beat_progress(records)) == "[RUNNING   ] step 42"


EVALUATES_AND_SAVES = '''
import os, time, torch
beats = os.path.join(os.environ["SLURMGEN_HEARTBEAT_DIR"], "rank-0")
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(3):
    model(torch.randn(2, 4)).sum().backward()
    opt.step()
trained = open(beats).read().split()
with torch.no_grad():  # an evaluation: forward passes, no optimizer step, for a while
    for _ in range(8):
        model(torch.randn(2, 4))
        time.sleep(0.1)
evaluated = open(beats).read().split()

class Slow:  # a big checkpoint: what its save writes takes a while
    def __reduce__(self):
        global during
        during = open(beats).read().split()
        return (str, ("x",))

torch.save({"model": model.state_dict(), "slow": Slow()}, "ckpt.pt")
after = open(beats).read().split()
print(trained, evaluated, during, after)
'''


def test_a_plain_scripts_evaluation_and_own_save_are_progress_not_a_hang(hf_cache, tmp_path):
    """Progress is any work: forward passes beat (at the same optimizer step), so a long evaluation, a
    generation or a long gradient accumulation is no hang; torch.save is a save, whose beat carries the
    save's allowance (600 s at least) while it runs, as the entry points' checkpoints do."""
    (tmp_path / "loop.py").write_text(EVALUATES_AND_SAVES)
    run = subprocess.run([sys.executable, "loop.py"], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                         env=hooked_env(hf_cache, tmp_path, RANK="0", SLURMGEN_BEAT_SECONDS="0"))
    assert run.returncode == 0, run.stderr
    trained, evaluated, during, after = ast.literal_eval(run.stdout.strip().replace("] [", "], ["))
    assert trained[1] == evaluated[1] == "3" and float(evaluated[2]) > float(trained[2]) + 0.5, (trained, evaluated)
    assert during[1] == "3" and during[5:7] == ["save", "600"], during
    assert after[1] == "3" and "save" not in after, after
