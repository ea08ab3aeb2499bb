"""What slurmgen.submit.submitit_adapter relies on, checked against the installed submitit.

Each failure names the submitit API that changed, so an upgrade that breaks the adapter says
where to look instead of failing somewhere inside a submission. No Slurm needed: srun and
sbatch are stubs on PATH, and the one job that runs uses the local executor.
"""
import inspect
import os
import signal
import subprocess
import sys

import pytest
import submitit
from submitit.core import job_environment
from submitit.core.utils import FailedJobError, JobPaths, cloudpickle_dump, pickle_load
from submitit.local import local as local_module

from slurmgen.submit import submitit_adapter as adapter
from slurmgen.plan.spec import JobSpec
from slurmgen.submit.parameters import NO_LIMIT_MINUTES, slurm_parameters

UNEVEN = JobSpec(gpus=(1, 1, 2, 2))


def changed(what: str, detail: str) -> str:
    return (f"submitit {submitit.__version__} changed {what} (slurmgen.submit.submitit_adapter was written "
            f"against {adapter.WRITTEN_AGAINST}): {detail}")


def parameters(func) -> list:
    return list(inspect.signature(func).parameters)


@pytest.fixture
def fake_slurm(tmp_path, monkeypatch):
    """srun only has to exist (SlurmExecutor checks); sbatch answers as Slurm's does."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name, body in (("srun", "exit 1"), ("sbatch", "echo 'Submitted batch job 4242'")):
        (bindir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bindir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")


# ---------------------------------------------------------------------------- private methods overridden
@pytest.mark.parametrize("name,expected", [
    ("_num_tasks", ["self"]),
    ("_make_submission_file_text", ["self", "command", "uid"]),
])
def test_overridden_private_methods_keep_their_signature(name, expected):
    method = getattr(submitit.SlurmExecutor, name, None)
    assert method is not None, changed(f"SlurmExecutor.{name}", "the method is gone")
    assert parameters(method) == expected, changed(
        f"SlurmExecutor.{name}", f"parameters {parameters(method)}, expected {expected}")


def test_slurm_executor_accepts_the_arguments_passed_on():
    missing = {"folder", "max_num_timeout", "python"} - set(parameters(submitit.SlurmExecutor.__init__))
    assert not missing, changed("SlurmExecutor.__init__", f"no parameter {sorted(missing)}")


def test_missing_srun_is_still_a_runtime_error(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # submission.py turns this error into one line
    with pytest.raises(RuntimeError, match="srun"):
        adapter.slurm_executor(tmp_path, 6, True)


def submit_uneven(folder, spec):
    """Through submitit's real submit path, sbatch stubbed: the script it wrote and the handle."""
    no_limit = spec.time is None
    executor = adapter.slurm_executor(folder, sum(spec.gpus), no_limit)
    executor.update_parameters(**slurm_parameters(spec))
    job = executor.submit(int)
    return job.paths.submission_file.read_text(), job


def test_uneven_job_handle_counts_every_task(fake_slurm, tmp_path):
    _, job = submit_uneven(tmp_path, UNEVEN)
    assert job.num_tasks == 6, changed(
        "how it sizes a submitted job", f"{job.num_tasks} tasks, not the 6 the _num_tasks override gives")


def test_sbatch_script_has_every_task_and_no_time_limit(fake_slurm, tmp_path):
    text, _ = submit_uneven(tmp_path, UNEVEN)
    lines = text.splitlines()
    assert "#SBATCH --ntasks=6" in lines, changed("the sbatch script", "no '#SBATCH --ntasks=6' line")
    time_lines = [l for l in lines if l.startswith(("#SBATCH --time", "#SBATCH -t"))]
    assert time_lines == [], changed(
        "how it writes the time limit", f"{time_lines} survives the override that drops it")


def test_sbatch_script_keeps_a_given_time_limit(fake_slurm, tmp_path):
    text, _ = submit_uneven(tmp_path, JobSpec(gpus=(1,), time="2:00:00"))
    assert "#SBATCH --time=2:00:00" in text.splitlines(), changed("the sbatch script", "no --time line")


def test_plain_executor_writes_the_time_line_the_override_drops(fake_slurm, tmp_path):
    executor = submitit.SlurmExecutor(tmp_path)
    executor.update_parameters(time=NO_LIMIT_MINUTES)
    text = executor._make_submission_file_text("python -m submitit.core._submit F", "uid")
    assert f"#SBATCH --time={NO_LIMIT_MINUTES}" in text.splitlines(), changed(
        "the sbatch time line", "no '#SBATCH --time=MINUTES' line for the override to drop")


# ---------------------------------------------------------------------------- handles and files
def test_slurm_job_handle_has_every_task(tmp_path):
    job = adapter.slurm_job(tmp_path, "4242", 6)
    assert parameters(submitit.SlurmJob.__init__)[:4] == ["self", "folder", "job_id", "tasks"], changed(
        "SlurmJob.__init__", f"parameters {parameters(submitit.SlurmJob.__init__)}")
    assert job.num_tasks == 6, changed("SlurmJob(tasks=...)", f"{job.num_tasks} tasks, not 6")
    assert [job.task(k).task_id for k in (0, 5)] == [0, 5], changed("SlurmJob.task()", "wrong task ids")


def test_job_paths_name_logs_and_results(tmp_path):
    assert parameters(JobPaths.__init__)[:4] == ["self", "folder", "job_id", "task_id"], changed(
        "JobPaths.__init__", f"parameters {parameters(JobPaths.__init__)}")
    paths = adapter.job_paths(tmp_path, "4242", 3)
    for name in ("stdout", "stderr", "result_pickle"):
        value = getattr(paths, name, None)
        assert value is not None, changed("JobPaths", f"no .{name}")
        assert "4242" in value.name and "3" in value.name, changed(f"JobPaths.{name}", str(value))
    assert len({paths.stdout, paths.stderr, paths.result_pickle}) == 3


@pytest.mark.parametrize("outcome,value", [("success", {"loss": 1.0}), ("error", "Traceback ...")])
def test_result_pickle_is_outcome_then_value(tmp_path, outcome, value):
    assert parameters(pickle_load) == ["filename"], changed("pickle_load", str(parameters(pickle_load)))
    path = adapter.job_paths(tmp_path, "7", 0).result_pickle
    cloudpickle_dump((outcome, value), path)
    assert adapter.result_outcome(path) == outcome
    job = local_module.LocalJob(tmp_path, "7")  # submitit's own reader of the same file
    if outcome == "success":
        assert job.result() == value, changed("the result pickle", "it no longer holds (outcome, value)")
    else:
        with pytest.raises(FailedJobError):
            job.result()


class StubProcess:
    def __init__(self, code):
        self.code = code

    def poll(self):
        return self.code


@pytest.mark.parametrize("code,expected", [(None, adapter.LOCAL_RUNNING), (-2, adapter.LOCAL_INTERRUPTED)])
def test_local_job_state_names(tmp_path, code, expected):
    state = local_module.LocalJob(tmp_path, "7", process=StubProcess(code)).state
    assert state == expected, changed("LocalJob.state", f"{state!r} where the adapter expects {expected!r}")


# ---------------------------------------------------------------------------- local executor
def test_own_session_patch_still_reaches_popen():
    assert local_module.subprocess is subprocess, changed(
        "submitit.local.local", "no module-level `subprocess` for own_session() to replace")
    names = local_module.start_controller.__code__.co_names
    assert {"subprocess", "Popen"} <= set(names), changed(
        "start_controller", "it no longer calls subprocess.Popen through the module's name")
    with adapter.own_session():
        assert local_module.subprocess.Popen.keywords == {"start_new_session": True}
    assert local_module.subprocess is subprocess


PROBE = ("import json, os, sys; names = sys.argv[1:]; "
         "print(json.dumps({'sid': os.getsid(0), 'env': {n: os.environ.get(n) for n in names}}))")


@pytest.mark.timeout(120)
def test_local_job_runs_in_own_session_with_the_expected_environment(tmp_path):
    """One real local job: its controller in a new session, its task environment as task.py reads it."""
    import json

    names = [adapter.EXECUTOR_ENV, adapter.FOLDER_ENV, *adapter.LOCAL_ENV.values()]
    executor = submitit.LocalExecutor(tmp_path)
    executor.update_parameters(timeout_min=2)
    with adapter.own_session():
        job = executor.submit(submitit.helpers.CommandFunction([sys.executable, "-c", PROBE, *names],
                                                               verbose=False))
    seen = json.loads(job.result())
    assert seen["sid"] != os.getsid(0), changed("LocalExecutor", "own_session() no longer detaches the controller")
    env = seen["env"]
    assert env[adapter.EXECUTOR_ENV] == adapter.LOCAL_EXECUTOR, changed(adapter.EXECUTOR_ENV, repr(env))
    assert os.path.realpath(env[adapter.FOLDER_ENV] or "") == os.path.realpath(tmp_path), changed(
        adapter.FOLDER_ENV, repr(env))
    local = {key: env[name] for key, name in adapter.LOCAL_ENV.items()}
    assert local == {"num_tasks": "1", "global_rank": "0", "local_rank": "0", "job_id": job.job_id}, changed(
        "the local task environment", repr(local))
    result = adapter.job_paths(tmp_path, job.job_id, 0).result_pickle
    assert adapter.result_outcome(result) == "success", changed("where results go", str(result))


def test_local_environment_names_match_submitit():
    theirs = local_module.LocalJobEnvironment._env
    differ = {key: theirs.get(key) for key, name in adapter.LOCAL_ENV.items() if theirs.get(key) != name}
    assert not differ, changed("LocalJobEnvironment's variables", f"now {differ}")
    assert local_module.LocalJobEnvironment.name() == adapter.LOCAL_EXECUTOR, changed(
        "the local executor's name", local_module.LocalJobEnvironment.name())


# ---------------------------------------------------------------------------- preemption signal
def test_preempt_signal_is_submitits():
    assert job_environment._PREEMPT_SIG_ENV == adapter.PREEMPT_SIGNAL_ENV, changed(
        "the preemption signal variable", job_environment._PREEMPT_SIG_ENV)
    theirs = job_environment.JobEnvironment._usr_sig()
    assert adapter.preempt_signal() == theirs, changed("the preemption signal", f"{theirs!r}")
    assert adapter.preempt_signal({adapter.PREEMPT_SIGNAL_ENV: "USR1"}) == signal.SIGUSR1


def test_submitits_handler_is_on_that_signal_and_takes_signum_frame(tmp_path):
    """task._StopOnSignal wraps whatever handler submitit installed and calls it as (signum, None)."""
    signum = adapter.preempt_signal()
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGCONT, signum)}
    try:
        env = local_module.LocalJobEnvironment()
        env._handle_signals(JobPaths(tmp_path, "7", 0), submitit.helpers.DelayedSubmission(int))
        handler = signal.getsignal(signum)
    finally:
        for s, previous in saved.items():
            signal.signal(s, previous)
    assert callable(handler), changed("JobEnvironment._handle_signals", f"no handler on {signum!r}")
    assert parameters(handler)[:2] == ["signum", "frame"], changed(
        "the preemption handler", f"parameters {parameters(handler)}")
