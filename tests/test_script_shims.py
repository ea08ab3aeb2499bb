"""Run rendered scripts with recording stand-ins for srun, scontrol, torchrun and the job's Python.

Unit level only: this checks the script's own arithmetic (node ranks, master address and port,
fail-fast, requeue on the warning signal). The end-to-end tests run the same scripts on Slurm.
"""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

SHIMS = Path(__file__).parent / "shims"


def render_to(render_args, tmp_path, *args):
    out = tmp_path / "job.sh"
    python = [] if "--python" in args else ["--python", str(SHIMS / "python")]
    result = render_args("render", "-o", str(out), "--log-dir", str(tmp_path / "logs"),
                         "--no-preflight", "--no-net-check", *python, *args)
    assert result.exit_code == 0, result.output
    return out


def shim_env(tmp_path, **extra):
    env = dict(os.environ)
    env.update(
        PATH=f"{SHIMS}:{Path(sys.executable).parent}:{env['PATH']}",
        SHIM_LOG=str(tmp_path / "calls.jsonl"),
        SLURM_JOB_ID="1234",
        SLURM_JOB_NODELIST_HET_GROUP_0="node[1-2]",
        SLURM_JOB_NODELIST_HET_GROUP_1="node[3-4]",
        SLURM_JOB_NODELIST="node[1-2]",
        SHIM_HOSTS_0="node1,node2",
        SHIM_HOSTS_1="node3,node4",
        SLURMGEN_POLL_SECONDS="0.1",
        SHIM_REAL_PYTHON=sys.executable,
    )
    env.update(extra)
    return env


def calls(tmp_path, tool):
    lines = (tmp_path / "calls.jsonl").read_text().splitlines()
    return [c for c in map(json.loads, lines) if c["tool"] == tool]


def flag(argv, name):
    return next(a.split("=", 1)[1] for a in argv if a.startswith(f"--{name}="))


def test_uneven_layout_starts_one_torchrun_per_node(render_args, tmp_path):
    script = render_to(render_args, tmp_path, "--nodes", "4", "--gpus", "1,1,2,2",
                       "--env", "USER_VALUE=a b$c", "--", "--max_steps", "7")
    proc = subprocess.run(["bash", str(script)], env=shim_env(tmp_path), capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    runs = sorted(calls(tmp_path, "torchrun"), key=lambda c: int(flag(c["argv"], "node-rank")))
    assert len(runs) == 4
    assert [flag(c["argv"], "nnodes") for c in runs] == ["4"] * 4
    assert [flag(c["argv"], "nproc-per-node") for c in runs] == ["1", "1", "2", "2"]
    assert [flag(c["argv"], "node-rank") for c in runs] == ["0", "1", "2", "3"]
    assert [c["host"] for c in runs] == ["node1", "node2", "node3", "node4"]
    assert {flag(c["argv"], "master-addr") for c in runs} == {"node1"}
    assert {flag(c["argv"], "master-port") for c in runs} == {str(20000 + 1234 % 10000)}
    assert all(c["argv"][-4:] == ["-m", "train.sft", "--max_steps", "7"] for c in runs)
    # torchrun is the job's own interpreter's (--python), as for every other step, not PATH's.
    assert all(c["via_python"] for c in runs)
    assert all(c["env"]["USER_VALUE"] == "a b$c" for c in runs)
    sruns = sorted(calls(tmp_path, "srun"), key=lambda s: s["opts"]["het-group"])
    assert [s["opts"]["het-group"] for s in sruns] == ["0", "1"]
    assert all("cpus-per-task" in s["opts"] for s in sruns)


def test_srun_launcher_exports_rank_offsets(render_args, tmp_path):
    (tmp_path / "nothing.py").write_text("")
    script = render_to(render_args, tmp_path, "--nodes", "4", "--gpus", "1,1,2,2", "--launcher", "srun",
                       "--script", str(tmp_path / "nothing.py"))
    proc = subprocess.run(["bash", str(script)], env=shim_env(tmp_path), capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    sruns = sorted(calls(tmp_path, "srun"), key=lambda s: s["opts"]["het-group"])
    assert [(s["opts"]["nodes"], s["opts"]["ntasks-per-node"]) for s in sruns] == [("2", "1"), ("2", "2")]
    text = script.read_text()
    assert "export RANK=$(( 0 + SLURM_PROCID )) LOCAL_RANK=$SLURM_LOCALID GROUP_RANK=$(( 0 + SLURM_NODEID ))" in text
    assert "export RANK=$(( 2 + SLURM_PROCID )) LOCAL_RANK=$SLURM_LOCALID GROUP_RANK=$(( 2 + SLURM_NODEID ))" in text


def test_srun_launcher_gives_every_task_torchruns_variables(render_args, tmp_path):
    # A user's own script calls init_process_group("env://"): it needs what torchrun would set.
    record = tmp_path / "record.py"
    record.write_text("import json, os, sys\n"
                      "keys = ('RANK', 'LOCAL_RANK', 'GROUP_RANK', 'WORLD_SIZE', 'LOCAL_WORLD_SIZE', 'MASTER_ADDR', 'MASTER_PORT',"
                      " 'OMP_NUM_THREADS', 'GROUP_WORLD_SIZE', 'TORCHELASTIC_RUN_ID')\n"
                      "with open(os.environ['SHIM_LOG'], 'a') as log:\n"
                      "    log.write(json.dumps({'tool': 'task', 'env': {k: os.environ.get(k) for k in keys}}) + '\\n')\n")
    script = render_to(render_args, tmp_path, "--nodes", "4", "--gpus", "1,1,2,2", "--launcher", "srun",
                       "--python", sys.executable, "--script", str(record))
    # OMP_NUM_THREADS=1 from the login shell: each rank still gets its 4 CPUs' worth.
    proc = subprocess.run(["bash", str(script)], env=shim_env(tmp_path, OMP_NUM_THREADS="1"), capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    tasks = sorted((c["env"] for c in calls(tmp_path, "task")), key=lambda e: int(e["RANK"]))
    assert {e["OMP_NUM_THREADS"] for e in tasks} == {"4"}
    rows = [(e["RANK"], e["LOCAL_RANK"], e["GROUP_RANK"], e["WORLD_SIZE"], e["LOCAL_WORLD_SIZE"]) for e in tasks]
    assert rows == [("0", "0", "0", "6", "1"), ("1", "0", "1", "6", "1"), ("2", "0", "2", "6", "2"),
                    ("3", "1", "2", "6", "2"), ("4", "0", "3", "6", "2"), ("5", "1", "3", "6", "2")]
    assert {(e["MASTER_ADDR"], e["MASTER_PORT"]) for e in tasks} == {("node1", str(20000 + 1234 % 10000))}
    # A torch launch as torch and Lightning recognise it (is_torchelastic_launched), with the job's node
    # count: they take these variables, not the het component's own SLURM_NNODES and SLURM_PROCID.
    assert {(e["GROUP_WORLD_SIZE"], e["TORCHELASTIC_RUN_ID"]) for e in tasks} == {("4", "1234")}


def test_with_spares_a_part_of_a_component_on_a_spare_keeps_its_ranks(render_args, tmp_path):
    """--spares: the runtime places each part of a component itself (slurmgen.job.spares.Part); the
    first run as without spares, then component 1 as node4 (node rank 2) and the spare node5 (3)."""
    record = tmp_path / "record.py"
    record.write_text("import json, os\n"
                      "keys = ('RANK', 'LOCAL_RANK', 'GROUP_RANK', 'WORLD_SIZE', 'LOCAL_WORLD_SIZE', 'SHIM_HOST')\n"
                      "with open(os.environ['SHIM_LOG'], 'a') as log:\n"
                      "    log.write(json.dumps({'tool': 'task', 'env': {k: os.environ.get(k) for k in keys}}) + '\\n')\n")
    script = render_to(render_args, tmp_path, "--nodes", "4", "--gpus", "1,1,2,2", "--launcher", "srun", "--spares", "1",
                       "--python", sys.executable, "--script", str(record))
    env = shim_env(tmp_path, SLURM_JOB_NODELIST_HET_GROUP_2="node5", SHIM_HOSTS_2="node5")
    proc = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr

    def rows():
        tasks = sorted((c["env"] for c in calls(tmp_path, "task")), key=lambda e: int(e["RANK"]))
        (tmp_path / "calls.jsonl").write_text("")
        return [(e["RANK"], e["LOCAL_RANK"], e["GROUP_RANK"], e["LOCAL_WORLD_SIZE"], e["SHIM_HOST"]) for e in tasks]
    assert rows() == [("0", "0", "0", "1", "node1"), ("1", "0", "1", "1", "node2"), ("2", "0", "2", "2", "node3"),
                      ("3", "1", "2", "2", "node3"), ("4", "0", "3", "2", "node4"), ("5", "1", "3", "2", "node4")]
    launch = tmp_path / "logs" / ".slurmgen-1234" / "launch.sh"
    for part in (["1", "1", "2", "2", "node4"], ["2", "1", "3", "4", "node5"]):
        subprocess.run(["bash", "-c", 'source "$0" && "$@"', str(launch), "component_1", *part], env=env, check=True,
                       timeout=60)
    assert rows() == [("2", "0", "2", "2", "node4"), ("3", "1", "2", "2", "node4"),
                      ("4", "0", "3", "2", "node5"), ("5", "1", "3", "2", "node5")]


def test_failing_component_stops_the_others(render_args, tmp_path):
    script = render_to(render_args, tmp_path, "--nodes", "4", "--gpus", "1,1,2,2")
    start = time.monotonic()
    # The healthy component would sleep 600 s: ending far sooner means it was stopped. The bound
    # leaves room for a loaded machine (34 s seen in CI where 10 s is usual).
    proc = subprocess.run(["bash", str(script)], env=shim_env(tmp_path, SHIM_FAIL_NODE_RANK="2",
                                                             SHIM_SLEEP="600"),
                          capture_output=True, text=True, timeout=300)
    elapsed = time.monotonic() - start
    assert proc.returncode == 3
    assert elapsed < 150, f"script took {elapsed:.0f} s to stop the healthy component"
    assert "component 1 (2 node(s) x 2 GPUs) failed with exit status 3 (nodes node[3-4])" in proc.stderr


def test_every_component_that_fails_on_its_own_is_named(render_args, tmp_path):
    # Node rank 0 fails first (a peer that noticed); node rank 2 (the real culprit) 3 s later,
    # inside the settle window: both components are named, the job ends with the first status.
    script = render_to(render_args, tmp_path, "--nodes", "4", "--gpus", "1,1,2,2")
    proc = subprocess.run(["bash", str(script)], env=shim_env(tmp_path, SHIM_FAIL_NODE_RANK="0=4@0.2,2=3@3",
                                                             SHIM_SLEEP="120"),
                          capture_output=True, text=True, timeout=90)
    assert proc.returncode == 4
    lines = [line for line in proc.stderr.splitlines() if line.startswith("slurmgen:")]
    assert lines == ["slurmgen: component 0 (2 node(s) x 1 GPU) failed with exit status 4 (nodes node[1-2])",
                     "slurmgen: component 1 (2 node(s) x 2 GPUs) failed with exit status 3 (nodes node[3-4])",
                     "slurmgen: no rank had begun training (train.heartbeat): not retrying a failure"
                     " that would most likely happen again"]


def test_a_failure_after_training_started_is_retried(render_args, tmp_path):
    """Ranks have beaten: the failure is counted and the job requeued (--max-failures 2), and
    with no retry left it ends with the failure's status."""
    script = render_to(render_args, tmp_path, "--nodes", "4", "--gpus", "1,1,2,2")
    env = shim_env(tmp_path, SHIM_FAIL_NODE_RANK="2=3@0.5", SHIM_SLEEP="120", SHIM_BEAT="1",
                   SLURMGEN_SETTLE_SECONDS="1")
    proc = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=90)
    assert proc.returncode == 0, proc.stderr
    assert "slurmgen: failure 1 of at most 2 (crash): requeueing job 1234 to resume from its newest checkpoint\n" \
        in proc.stdout, proc.stdout + proc.stderr
    assert ["requeue", "Incomplete", "1234"] in [c["argv"] for c in calls(tmp_path, "scontrol")]
    failures = json.loads((tmp_path / "logs" / ".slurmgen-1234" / "state.json").read_text())["failures"]
    assert failures == [{"why": "crash", "node": ""}]
    # Two more runs of the requeued job (Slurm counts them): the third failure is one too many.
    subprocess.run(["bash", str(script)], env={**env, "SLURM_RESTART_COUNT": "1"}, capture_output=True, text=True,
                   timeout=90)
    proc = subprocess.run(["bash", str(script)], env={**env, "SLURM_RESTART_COUNT": "2"}, capture_output=True,
                          text=True, timeout=90)
    assert proc.returncode == 3
    assert "slurmgen: failure 3 (crash): no retry left (--max-failures 2)" in proc.stderr


def test_a_component_that_outlasts_the_settle_window_is_stopped(render_args, tmp_path):
    script = render_to(render_args, tmp_path, "--nodes", "4", "--gpus", "1,1,2,2")
    start = time.monotonic()
    proc = subprocess.run(["bash", str(script)],
                          env=shim_env(tmp_path, SHIM_FAIL_NODE_RANK="0=4@0.2,2=3@120", SHIM_SLEEP="600",
                                       SLURMGEN_SETTLE_SECONDS="2"),
                          capture_output=True, text=True, timeout=300)
    elapsed = time.monotonic() - start
    assert proc.returncode == 4
    # Far below node rank 2's own failure at 120 s (room for a loaded machine: 2 s settle, then TERM).
    assert elapsed < 90, f"the healthy component ran {elapsed:.0f} s past the settle window"
    assert "slurmgen: stopping the components still running" in proc.stderr
    assert "component 1 (2 node(s) x 2 GPUs) failed" not in proc.stderr


def wait_for_training(proc, tmp_path, state="training", timeout=90):
    """Until the job runtime has started the components (its record says "training", or STATE): the
    signal a test sends then reaches the script's own trap, not bash's default action at start-up."""
    record = tmp_path / "logs" / ".slurmgen-1234" / "state.json"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if json.loads(record.read_text()).get("state") == state:
                return
        except (OSError, ValueError):  # not written yet, or being replaced
            pass
        time.sleep(0.05)
    pytest.fail(f"the job runtime never reached {state} (script status {proc.poll()})")


def warn_and_wait(script, env, tmp_path, sig=signal.SIGUSR2, state="training"):
    """Run the script, send the time-limit warning (USR2) once it trains (or is in STATE), wait for
    the end: the status, stdout, stderr and the seconds from the warning to the end."""
    proc = subprocess.Popen(["bash", str(script)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    wait_for_training(proc, tmp_path, state)
    proc.send_signal(sig)
    warned = time.monotonic()
    out, err = proc.communicate(timeout=120)
    return proc.returncode, out, err, time.monotonic() - warned


def requeued(tmp_path):
    return ["requeue", "Incomplete", "1234"] in [c["argv"] for c in calls(tmp_path, "scontrol")]


def test_warning_signal_checkpoints_then_requeues(render_args, tmp_path):
    script = render_to(render_args, tmp_path, "--nodes", "4", "--gpus", "1,1,2,2")
    rc, out, err, _ = warn_and_wait(script, shim_env(tmp_path, SHIM_WAIT_STOP="1", SHIM_OUTCOME="stopped 7"), tmp_path)
    assert rc == 0, err
    assert "asking every rank to checkpoint" in out
    assert "slurmgen: checkpoint saved at step 7; requeueing job 1234 (restart 1 of at most 3)" in out
    assert requeued(tmp_path)


def test_warning_after_the_last_step_does_not_requeue_a_finished_run(render_args, tmp_path):
    # The warning lands after rank 0's last stop check: training finishes every step and says
    # so. Requeueing would rerun a finished job (and, with no restarts left, call it unfinished).
    script = render_to(render_args, tmp_path, "--nodes", "4", "--gpus", "1,1,2,2")
    rc, out, err, _ = warn_and_wait(script, shim_env(tmp_path, SHIM_WAIT_STOP="1", SHIM_OUTCOME="finished 85"), tmp_path)
    assert rc == 0, err
    assert "slurmgen: training finished before the warning could stop it; not requeueing" in out
    assert not requeued(tmp_path)


def test_a_crash_after_the_warning_is_a_failure_not_a_checkpoint(render_args, tmp_path):
    script = render_to(render_args, tmp_path, "--nodes", "4", "--gpus", "1,1,2,2")
    rc, out, err, _ = warn_and_wait(script, shim_env(tmp_path, SHIM_WAIT_STOP="1", SHIM_STOP_STATUS="5"), tmp_path)
    assert rc == 5, err
    assert "slurmgen: ranks failed after the warning before saying their checkpoint was whole" in err
    assert "no rank had begun training" in err  # the shim's ranks never beat: the code's own failure
    assert "requeueing job" not in out
    assert not requeued(tmp_path)


def test_a_program_that_reports_nothing_is_requeued_as_before(render_args, tmp_path):
    # A user's --script that honours the stop file but writes no outcome: requeued (it may have
    # checkpointed), without a step in the message.
    user_script = tmp_path / "train.py"
    user_script.write_text("")
    script = render_to(render_args, tmp_path, "--nodes", "2", "--gpus", "1", "--script", str(user_script))
    rc, out, err, _ = warn_and_wait(script, shim_env(tmp_path, SHIM_WAIT_STOP="1"), tmp_path)
    assert rc == 0, err
    assert "slurmgen: requeueing job 1234 (restart 1 of at most 3)" in out
    assert requeued(tmp_path)


def test_a_script_that_takes_no_stop_file_is_stopped_after_a_grace_and_requeued(render_args, tmp_path):
    # A user's own loop (no Trainer, so the rank hooks made no "stoppable" file): the warning's
    # stop file means nothing to it; it gets min(30, grace - 10) s, then TERM, and the log says
    # what is lost.
    user_script = tmp_path / "loop.py"
    user_script.write_text("")
    script = render_to(render_args, tmp_path, "--nodes", "2", "--gpus", "1", "--script", str(user_script),
                       "--grace", "15")
    rc, out, err, waited = warn_and_wait(script, shim_env(tmp_path, SHIM_SLEEP="300"), tmp_path)
    assert rc == 0, err
    assert 5 <= waited < 120, err  # min(30, 15 - 10) s from the warning, then TERM; not the 300 s sleep
    assert ("slurmgen: your code takes no stop file (it is not a Hugging Face Trainer): stopping it; the steps"
            " since its own last checkpoint are lost") in err
    assert "slurmgen: requeueing job 1234 (restart 1 of at most 3)" in out
    assert requeued(tmp_path)


def test_warning_after_last_restart_does_not_requeue(render_args, tmp_path):
    script = render_to(render_args, tmp_path, "--nodes", "2", "--gpus", "1", "--max-restarts", "1")
    (tmp_path / "logs" / ".slurmgen-1234").mkdir(parents=True)
    (tmp_path / "logs" / ".slurmgen-1234" / "state.json").write_text('{"restarts": 1}')  # what the first requeue left
    rc, out, err, _ = warn_and_wait(script, shim_env(tmp_path, SHIM_WAIT_STOP="1", SLURM_RESTART_COUNT="1"), tmp_path)
    assert rc == 1
    assert "slurmgen: job 1234 (restart 1 of at most 1)" in out
    assert "training unfinished; not requeueing: 1 restart(s) used" in err
    assert not requeued(tmp_path)


def test_restarts_are_counted_in_the_log_dir_not_by_slurm(render_args, tmp_path):
    # SLURM_RESTART_COUNT also counts preemptions and node failures: the budget is the script's own.
    script = render_to(render_args, tmp_path, "--nodes", "2", "--gpus", "1", "--max-restarts", "1")
    rc, out, err, _ = warn_and_wait(script, shim_env(tmp_path, SHIM_WAIT_STOP="1", SHIM_OUTCOME="stopped 4",
                                                  SLURM_RESTART_COUNT="5"), tmp_path)
    assert rc == 0, err
    assert "checkpoint saved at step 4; requeueing job 1234 (restart 1 of at most 1)" in out
    assert json.loads((tmp_path / "logs" / ".slurmgen-1234" / "state.json").read_text())["restarts"] == 1


def test_preemption_does_not_use_up_the_restarts(render_args, tmp_path):
    # Slurm refuses `scontrol requeue` during a preemption and requeues the job itself when its
    # GraceTime ends: the script checkpoints, says so and waits, using up no restart.
    script = render_to(render_args, tmp_path, "--nodes", "2", "--gpus", "1", "--max-restarts", "0")
    proc = subprocess.Popen(["bash", str(script)],
                            env=shim_env(tmp_path, SHIM_WAIT_STOP="1", SHIM_OUTCOME="stopped 9", SHIM_PREEMPTED="1"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    wait_for_training(proc, tmp_path)
    proc.send_signal(signal.SIGUSR2)
    wait_for_training(proc, tmp_path, state="preempted")  # its record says so, then it waits
    assert proc.poll() is None, "the script must wait for Slurm to requeue it"
    os.killpg(proc.pid, signal.SIGKILL)  # what Slurm does to the job's processes at the end of the GraceTime
    out, _ = proc.communicate(timeout=30)
    assert "slurmgen: checkpoint saved at step 9; job 1234 preempted: Slurm requeues it" in out
    assert not requeued(tmp_path)
    assert json.loads((tmp_path / "logs" / ".slurmgen-1234" / "state.json").read_text())["restarts"] == 0


def test_term_is_a_stop_request_too(render_args, tmp_path):
    # Sites that preempt without the job's --signal send TERM: checkpoint and requeue as for USR2.
    script = render_to(render_args, tmp_path, "--nodes", "4", "--gpus", "1,1,2,2")
    rc, out, err, _ = warn_and_wait(script, shim_env(tmp_path, SHIM_WAIT_STOP="1", SHIM_OUTCOME="stopped 3"), tmp_path,
                                    signal.SIGTERM)
    assert rc == 0, err
    assert "asking every rank to checkpoint" in out
    assert "checkpoint saved at step 3; requeueing job 1234 (restart 1 of at most 3)" in out
    assert requeued(tmp_path)


def test_warning_during_setup_is_not_lost(render_args, tmp_path):
    # The warning lands before the monitor's trap exists: it must still lead to a checkpoint
    # request and a requeue, not kill the batch shell.
    script = render_to(render_args, tmp_path, "--nodes", "4", "--gpus", "1,1,2,2",
                       "--setup", "kill -USR2 $$")
    proc = subprocess.run(["bash", str(script)], env=shim_env(tmp_path, SHIM_WAIT_STOP="1"),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "asking every rank to checkpoint" in proc.stdout
    assert ["requeue", "Incomplete", "1234"] in [c["argv"] for c in calls(tmp_path, "scontrol")]


def test_preflight_lets_components_share_a_node(render_args, tmp_path):
    # As if Slurm had put both het components on node1 and node2, as it may on 8-GPU nodes:
    # preflight counts one report per node of each component, says that the nodes are shared,
    # and the job trains (tests/e2e/test_guard_rails.py: the real thing).
    out = tmp_path / "job.sh"
    result = render_args("render", "-o", str(out), "--log-dir", str(tmp_path / "logs"),
                         "--nodes", "4", "--gpus", "1,1,2,2", "--python", str(SHIMS / "python"), "--no-net-check")
    assert result.exit_code == 0, result.output
    env = shim_env(tmp_path, SHIM_HOSTS_1="node1,node2", SHIM_GPUS_0="0", SHIM_GPUS_1="1,2")
    proc = subprocess.run(["bash", str(out)], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "slurmgen: preflight passed on 4 node(s)" in proc.stdout, proc.stdout
    assert "slurmgen: node1, node2 hold more than one component" in proc.stdout, proc.stdout
    runs = calls(tmp_path, "torchrun")
    assert sorted(flag(c["argv"], "node-rank") for c in runs) == ["0", "1", "2", "3"]


def test_a_warning_during_preflight_waits_for_every_preflight_step(render_args, tmp_path):
    # USR2 lands while the preflight steps run: `wait` returns early, but the script keeps
    # waiting until every step has reported, so the comparison sees the whole log; then training
    # starts, stops at once with a checkpoint, and the job is requeued.
    out = tmp_path / "job.sh"
    result = render_args("render", "-o", str(out), "--log-dir", str(tmp_path / "logs"), "--nodes", "4",
                         "--gpus", "1,1,2,2", "--python", str(SHIMS / "python"), "--module", "json", "--no-net-check")
    assert result.exit_code == 0, result.output
    rc, stdout, stderr, _ = warn_and_wait(out, shim_env(tmp_path, SHIM_PREFLIGHT_SLEEP="3", SHIM_WAIT_STOP="1",
                                                        SHIM_OUTCOME="stopped 1", SHIM_GPUS_0="0", SHIM_GPUS_1="0,1"),
                                          tmp_path, state="preflight")
    assert rc == 0, stdout + stderr
    assert "slurmgen: preflight passed on 4 node(s)" in stdout, stdout + stderr
    assert "asking every rank to checkpoint" in stdout
    assert "checkpoint saved at step 1; requeueing job 1234 (restart 1 of at most 3)" in stdout


def test_a_run_that_finished_is_not_repeated_when_slurm_requeues_it_again(render_args, tmp_path):
    # Slurm 25.11 requeues a preempted het job once more after its resumed run finished; that
    # run's outcome and record say so, and the next run ends at once instead of training again.
    script = render_to(render_args, tmp_path, "--nodes", "4", "--gpus", "1,1,2,2")
    folder = tmp_path / "logs" / ".slurmgen-1234"
    folder.mkdir(parents=True)
    (folder / "outcome").write_text("finished 30\n")
    (folder / "state.json").write_text('{"runs": [{"started": 1.0, "ended": 2.0, "state": "finished"}]}')
    env = shim_env(tmp_path, SLURM_RESTART_COUNT="2")
    proc = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "slurmgen: finished in an earlier run"
    assert not (tmp_path / "calls.jsonl").exists() or calls(tmp_path, "srun") == []
    # a run that was stopped is resumed as before
    (folder / "outcome").write_text("stopped 12\n")
    proc = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "earlier run" not in proc.stdout and len(calls(tmp_path, "srun")) == 2


def test_a_finished_word_a_failed_run_left_is_no_finish(render_args, tmp_path):
    """A user's Trainer says "finished" after each train(); a script that trains in stages, or fails after
    train() (saving, evaluating, pushing), fails its run: the retry trains, it does not end as done."""
    script = render_to(render_args, tmp_path, "--nodes", "4", "--gpus", "1,1,2,2")
    folder = tmp_path / "logs" / ".slurmgen-1234"
    folder.mkdir(parents=True)
    (folder / "outcome").write_text("finished 30\n")
    (folder / "state.json").write_text('{"failures": [{"why": "crash", "node": ""}], "runs": [{"started": 1.0,'
                                       ' "ended": 2.0, "state": "requeued"}]}')
    proc = subprocess.run(["bash", str(script)], env=shim_env(tmp_path, SLURM_RESTART_COUNT="1"), capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "earlier run" not in proc.stdout and len(calls(tmp_path, "srun")) == 2


def test_a_job_id_that_comes_back_starts_afresh(render_args, tmp_path):
    """Another job of the same id (two clusters sharing a log folder, a reset counter) left its folder, a
    "finished" word in it: this job's first run sets it aside and trains."""
    script = render_to(render_args, tmp_path, "--nodes", "4", "--gpus", "1,1,2,2")
    folder = tmp_path / "logs" / ".slurmgen-1234"
    folder.mkdir(parents=True)
    (folder / "outcome").write_text("finished 30\n")
    (folder / "state.json").write_text('{"runs": [{"started": 1.0, "ended": 2.0, "state": "finished"}]}')
    proc = subprocess.run(["bash", str(script)], env=shim_env(tmp_path), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "earlier run" not in proc.stdout and len(calls(tmp_path, "srun")) == 2
    [aside] = (tmp_path / "logs").glob(".slurmgen-1234.before-*")  # the other job's, kept for a person to read
    assert (aside / "outcome").read_text() == "finished 30\n"


def test_apptainer_wraps_every_step_and_the_host_needs_slurmgen(render_args, tmp_path):
    """--container apptainer:IMAGE under the stand-ins (apptainer's records and runs the command
    here): every torchrun agent starts inside the image, with the log directory bound. The
    script's own checks stay on the host: a Python there without slurmgen stops the job at once,
    with one line, before any step."""
    script = render_to(render_args, tmp_path, "--nodes", "4", "--gpus", "1,1,2,2",
                       "--container", "apptainer:/images/t.sif")
    record = tmp_path / "apptainer.jsonl"
    env = shim_env(tmp_path, APPTAINER_STANDIN_LOG=str(record), SLURM_SUBMIT_DIR=str(tmp_path))
    proc = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    wrapped = [json.loads(line) for line in record.read_text().splitlines()]
    assert [w["command"][:2] for w in wrapped] == [["bash", "-c"]] * 4
    assert all(w["image"] == "/images/t.sif" and str(tmp_path / "logs") in w["bind"].split(",") for w in wrapped)
    assert len(calls(tmp_path, "torchrun")) == 4
    steps = len(calls(tmp_path, "srun"))

    bare = "/usr/bin/python3"
    script = render_to(render_args, tmp_path, "--nodes", "4", "--gpus", "1,1,2,2",
                       "--container", "apptainer:/images/t.sif", "--python", bare)
    env = {k: v for k, v in env.items() if k != "PYTHONPATH"}
    proc = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr == (f"slurmgen: {bare} on {os.uname().nodename}, outside the container, cannot import slurmgen,"
                           " which this script's own checks need: install it there, or load it with --setup\n")
    assert len(calls(tmp_path, "srun")) == steps  # no step of its own
