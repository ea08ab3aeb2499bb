"""python -m slurmgen.submit without Slurm: parameters, task environment, failure reports, CLI.

The one job that runs here uses submitit's local executor with a plain script (no torch).
"""
import json
import os
import pickle
import subprocess
import sys
import time
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from slurmgen.cli import cli, every_command
from slurmgen.submit import blame, handle, parameters, submission
from slurmgen.submit import task
from slurmgen.plan.spec import JobSpec
from slurmgen.plan.words import SpecError
from slurmgen.submit import submit_command
from tests.test_cli_errors import CASES

REPO = Path(__file__).resolve().parent.parent
UNEVEN = JobSpec(gpus=(1, 1, 2, 2), cpus_per_gpu=3, train_args=("--output_dir", "run"))


# ---------------------------------------------------------------------------- executor parameters
def test_slurm_parameters_one_task_per_gpu():
    params = parameters.slurm_parameters(UNEVEN)
    assert params["nodes"] == 4
    assert params["cpus_per_task"] == 3
    assert params["additional_parameters"] == {"ntasks": 6, "gpus_per_task": 1}
    assert "--kill-on-bad-exit=1" in params["srun_args"]
    assert "--cpus-per-task=3" in params["srun_args"]
    assert params["time"] == parameters.NO_LIMIT_MINUTES == 525_600  # a year: no limit, not a time-out
    assert params["signal_delay_s"] == UNEVEN.grace == 180  # the default --grace
    for absent in ("partition", "account", "qos", "mem", "nodelist", "setup"):
        assert absent not in params


def test_slurm_parameters_map_every_job_option():
    spec = JobSpec(gpus=(2, 2), job_name="exp", partition="gpu", account="lab", qos="high",
                   time="1:30:10", mem="64G", constraint="a100", nodelist=("n1", "n2"),
                   exclude="n9", setup=("module load cuda",), grace=60)
    params = parameters.slurm_parameters(spec)
    assert params["job_name"] == "exp"
    assert (params["partition"], params["account"], params["qos"]) == ("gpu", "lab", "high")
    assert (params["mem"], params["constraint"], params["exclude"]) == ("64G", "a100", "n9")
    assert params["nodelist"] == "n1,n2"
    assert params["setup"] == ["module load cuda"]
    assert params["time"] == 91  # whole minutes, rounded up, for submitit's time-out accounting
    assert params["additional_parameters"]["time"] == "1:30:10"  # the #SBATCH line: exact
    assert params["signal_delay_s"] == 60


def test_local_parameters_world_size_processes():
    params = parameters.local_parameters(JobSpec(gpus=(2,), time="10"))
    assert params["tasks_per_node"] == 2
    assert params["gpus_per_node"] == 2
    assert params["timeout_min"] == 10


def test_accelerate_is_refused_with_one_line():
    with pytest.raises(SpecError, match="--launcher accelerate: python -m slurmgen.submit starts one task"):
        parameters.check_submittable(JobSpec(gpus=(2, 2), launcher="accelerate"))
    parameters.check_submittable(JobSpec(gpus=(2, 2), launcher="srun"))


@pytest.fixture
def fake_srun(tmp_path, monkeypatch):
    """submitit's Slurm executor insists on srun being on PATH; sbatch is never called here."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "srun").write_text("#!/bin/sh\nexit 1\n")
    (bindir / "srun").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")


def sbatch_text(spec, folder):
    executor = submission._executor(spec, folder, local=False)
    return executor._make_submission_file_text("python -m submitit.core._submit F", "uid")


def test_sbatch_text_uneven_layout(fake_srun, tmp_path):
    text = sbatch_text(UNEVEN, tmp_path)
    for line in ("#SBATCH --nodes=4", "#SBATCH --ntasks=6", "#SBATCH --gpus-per-task=1",
                 "#SBATCH --cpus-per-task=3", f"#SBATCH --signal=USR2@{UNEVEN.grace}"):
        assert line in text.splitlines()
    assert "--time" not in text  # no limit asked: the partition's default applies, as in render
    assert "--kill-on-bad-exit=1" in text
    assert "hetjob" not in text


def test_sbatch_text_time_limit(fake_srun, tmp_path):
    text = sbatch_text(JobSpec(gpus=(1,), time="2:00:00"), tmp_path)
    assert "#SBATCH --time=2:00:00" in text.splitlines()


def test_executor_counts_every_task(fake_srun, tmp_path):
    executor = submission._executor(UNEVEN, tmp_path, local=False)
    assert executor._num_tasks() == 6  # submitit's own count would be nodes x 1 = 4


def test_no_slurm_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(submission.SubmitError, match="srun.*use --local"):
        submission._executor(UNEVEN, tmp_path, local=False)


# ---------------------------------------------------------------------------- output dir
@pytest.mark.parametrize("args,expected", [
    (["--output_dir", "runs/a", "--max_steps", "3"], "runs/a"),
    (["--max_steps", "3", "--output_dir=runs/b"], "runs/b"),
    (["--output-dir", "runs/c"], "runs/c"),
    (["--max_steps", "3"], None),
    (["--output_dir"], None),
])
def test_output_dir_arg(args, expected):
    assert task.output_dir_arg(args) == expected


def test_output_dir_relative_to_submitting_directory(tmp_path):
    assert parameters.resolve_output_dir(["--output_dir", "run"], cwd=str(tmp_path)) == tmp_path / "run"
    assert parameters.resolve_output_dir(["--output_dir", "/abs/run"], cwd=str(tmp_path)) == Path("/abs/run")


# ---------------------------------------------------------------------------- task environment
def slurm_task_env(procid, nodeid, localid):
    """What srun gives task PROCID of a 1,1,2,2 step (see DESIGN.md), plus leftovers of a torchrun
    worker in the submitting shell that must not leak into the job."""
    return {"SLURM_PROCID": str(procid), "SLURM_NODEID": str(nodeid), "SLURM_LOCALID": str(localid),
            "SLURM_STEP_NUM_TASKS": "6", "SLURM_STEP_TASKS_PER_NODE": "1(x2),2(x2)",
            "SLURM_STEP_NODELIST": "node[1-4]", "SLURM_JOB_ID": "1234", "SLURM_STEP_ID": "0",
            "CUDA_VISIBLE_DEVICES": "0", "RANK": "7", "WORLD_SIZE": "8", "MASTER_ADDR": "elsewhere"}


@pytest.mark.parametrize("procid,nodeid,localid,local_world", [
    (0, 0, 0, 1), (1, 1, 0, 1), (2, 2, 0, 2), (3, 2, 1, 2), (4, 3, 0, 2), (5, 3, 1, 2)])
def test_slurm_task_ranks_uneven(procid, nodeid, localid, local_world):
    from train.distenv import DistEnv

    env = slurm_task_env(procid, nodeid, localid)
    task.prepare_environ(env, (("HF_HUB_OFFLINE", "1"),), None, 600, threads=3)
    denv = DistEnv.from_environ(env)
    assert (denv.rank, denv.world_size, denv.local_world_size) == (procid, 6, local_world)
    assert denv.master_addr == "node1"
    assert env["HF_HUB_OFFLINE"] == "1"
    assert env["SLURMGEN_COLLECTIVE_TIMEOUT"] == "600"
    assert env["OMP_NUM_THREADS"] == "3"


@pytest.mark.parametrize("procid,nodeid,localid,gpus", [(1, 1, 0, "1"), (2, 2, 0, "2"), (3, 2, 1, "2")])
def test_every_task_sees_its_nodes_gpus_and_uses_its_own(procid, nodeid, localid, gpus):
    """With --gpu-bind=none Slurm leaves CUDA_VISIBLE_DEVICES unset on a node with several of the
    job's GPUs: the task names them all and picks its own by local rank (NCCL sees its peers)."""
    from train.distenv import DistEnv

    env = slurm_task_env(procid, nodeid, localid)
    del env["CUDA_VISIBLE_DEVICES"]
    env["SLURM_GPUS_ON_NODE"] = gpus
    task.prepare_environ(env, (), None, None)
    denv = DistEnv.from_environ(env)
    denv.export(env)
    assert env["CUDA_VISIBLE_DEVICES"] == ",".join(str(i) for i in range(int(gpus)))
    assert denv.device_index == localid
    assert (env["LOCAL_RANK"], env["LOCAL_WORLD_SIZE"]) == (str(localid), gpus)
    assert "--gpu-bind=none" in parameters.slurm_parameters(UNEVEN)["srun_args"]


def test_master_port_option_reaches_slurm_tasks():
    from train.distenv import DistEnv

    env = slurm_task_env(0, 0, 0)
    task.prepare_environ(env, (), 23456, None)
    assert DistEnv.from_environ(env).master_port == 23456


def test_port_derived_from_job_id_within_port_range_as_in_render():
    from train.distenv import DistEnv

    env = slurm_task_env(0, 0, 0)  # job 1234
    task.prepare_environ(env, (), None, None, port_range=(30000, 30099))
    assert DistEnv.from_environ(env).master_port == 30034


def test_local_executor_environment_gives_ranks():
    from train.distenv import DistEnv

    env = {"SUBMITIT_EXECUTOR": "local", "SUBMITIT_LOCAL_NTASKS": "2", "SUBMITIT_LOCAL_GLOBALID": "1",
           "SUBMITIT_LOCAL_LOCALID": "1", "SUBMITIT_LOCAL_JOB_ID": "99",
           # an salloc shell's variables must not turn local processes into Slurm tasks
           "SLURM_PROCID": "0", "SLURM_STEP_ID": "0", "SLURM_NTASKS": "5"}
    task.prepare_environ(env, (), 29999, None)
    denv = DistEnv.from_environ(env)
    assert (denv.rank, denv.local_rank, denv.world_size, denv.local_world_size) == (1, 1, 2, 2)
    assert (denv.master_addr, denv.master_port) == ("127.0.0.1", 29999)


def test_threads_follow_the_ranks_cores_unless_env_says_otherwise():
    """OMP_NUM_THREADS=8 inherited from the login shell does not win over a rank's 2 CPUs; the
    user's --env OMP_NUM_THREADS=8 does."""
    env = {"OMP_NUM_THREADS": "8"}
    task.prepare_environ(env, (), None, None, threads=2)
    assert env["OMP_NUM_THREADS"] == "2"
    env = {"OMP_NUM_THREADS": "1"}
    task.prepare_environ(env, (("OMP_NUM_THREADS", "8"),), None, None, threads=2)
    assert env["OMP_NUM_THREADS"] == "8"


def test_task_is_checkpointable_and_pickles_by_reference():
    from submitit.helpers import DelayedSubmission

    train_task = parameters.make_task(UNEVEN)
    resubmission = train_task.checkpoint()
    assert isinstance(resubmission, DelayedSubmission)
    assert resubmission.function == train_task
    assert pickle.loads(pickle.dumps(train_task)) == train_task
    assert train_task.target == ("module", "train.sft")
    assert train_task.train_args == ("--output_dir", "run")


def test_local_task_gets_a_free_port():
    assert parameters.make_task(UNEVEN).master_port is None  # Slurm: derived from the job id
    assert 1024 <= parameters.make_task(UNEVEN, local=True).master_port <= 65535


def test_nonzero_exit_of_entry_point_is_an_error(tmp_path, monkeypatch):
    script = tmp_path / "bad.py"
    script.write_text("import sys\nprint('error: no data', file=sys.stderr)\nsys.exit(2)\n")
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)
    stop = task._StopOnSignal(tmp_path / "stop", True, 30)
    with pytest.raises(task.TrainingFailed, match="exited with status 2"):
        task.TrainTask(target=("script", str(script)))._run(stop)


def test_warning_after_the_last_step_does_not_requeue(tmp_path, capsys):
    """USR2 arrived after the entry point's last stop check: it finished every step, so
    submitit's requeueing handler is not called; a stopped run (or a user's script) is."""
    handed_over = []
    stop = task._StopOnSignal(tmp_path / "stop", True, 30)
    stop.submitit_handler = lambda signum, frame: handed_over.append(signum)
    stop.requested = True
    stop.finish({"stopped_early": False, "global_step": 12})
    assert handed_over == []
    assert "training finished before the warning could stop it; not requeueing" in capsys.readouterr().err
    stop.finish({"stopped_early": True, "global_step": 7})
    stop.finish(None)
    assert handed_over == [stop.signum, stop.signum]
    # Stopped by SIGTERM (no USR2 came): checkpointed, so requeued the same way.
    stop.requested = False
    stop.finish({"stopped_early": True, "global_step": 9})
    stop.finish({"stopped_early": False, "global_step": 12})
    assert handed_over == [stop.signum] * 3


# ---------------------------------------------------------------------------- failure reports
def test_pick_failed_task_earliest_then_lowest():
    outcomes = {0: ("success", 5.0), 3: ("error", 10.0), 4: ("error", 10.5), 1: ("error", 30.0)}
    assert blame.pick_failed_task(outcomes) == 3
    assert blame.pick_failed_task({5: ("error", 1.2), 2: ("error", 1.9)}) == 2
    assert blame.pick_failed_task({0: ("success", 1.0)}) is None


def test_srun_culprit_skips_tasks_killed_because_of_it():
    log = ("srun: error: node2: task 1: Killed\n"
           "srun: error: node4: task 5: Exited with exit code 1\n"
           "srun: error: node3: tasks 2-3: Terminated\n")
    assert blame.srun_culprit(log) == (5, "node4")
    assert blame.srun_culprit("srun: error: node3: tasks 2-3: Killed\n") is None
    assert blame.srun_culprit("srun: error: node4: task 1: Aborted\n") == (1, "node4")


def test_task_host_from_newest_start_line(tmp_path):
    log = tmp_path / "1_3_log.out"
    log.write_text("submitit INFO - Starting\n"
                   f"{task.START_MARK} task 3 on node3: rank 3/6 local 1/2\n"
                   f"{task.START_MARK} task 3 on node4: rank 3/6 local 1/2\n")
    assert blame.task_host(log) == "node4"
    assert blame.task_host(tmp_path / "missing") is None


def test_tail_drops_progress_bars_and_blank_lines(tmp_path):
    log = tmp_path / "x.err"
    log.write_text("first\n\n 12%|█▎        | 1/8 [00:00<00:06,  1.01it/s]\r 25%|██▌  | 2/8\n"
                   + "".join(f"line {i}\n" for i in range(30)))
    text = blame.tail(log, 5)
    assert text.splitlines() == [f"line {i}" for i in range(25, 30)]
    assert blame.tail(tmp_path / "missing") == ""


def test_job_failed_message_names_the_task(tmp_path):
    failure = blame.TaskFailure(3, "node3", tmp_path / "1_3_log.err", "boom")
    assert str(submission.JobFailed("12", "FAILED", failure)) == "job 12 FAILED: task 3 on node3 failed"
    nobody = blame.TaskFailure(None, None, tmp_path / "1_0_log.err", "")
    assert str(submission.JobFailed("12", "CANCELLED", nobody)) == "job 12 CANCELLED"


class FakeJob:
    job_id = "4242"


def fake_submission(tmp_path, world=2, outcomes=None):
    """A Submission over files in tmp_path, as a finished job would have left them."""
    from submitit.core.utils import JobPaths, cloudpickle_dump

    sub = submission.Submission(FakeJob(), tmp_path, world, None, local=False)
    for index, (outcome, value, log) in (outcomes or {}).items():
        paths = JobPaths(tmp_path, "4242", index)
        paths.stdout.write_text(f"{task.START_MARK} task {index} on node{index + 1}: rank\n")
        paths.stderr.write_text(log)
        if outcome:
            cloudpickle_dump((outcome, value), paths.result_pickle)
    return sub


def test_failure_names_task_that_raised(tmp_path, monkeypatch):
    sub = fake_submission(tmp_path, outcomes={
        0: ("success", {}, ""), 1: ("error", "Traceback", "error: model path not found: x\n")})
    monkeypatch.setattr(sub, "state", lambda: "FAILED")
    failure = sub.failure()
    assert (failure.task, failure.host) == (1, "node2")
    assert "model path not found" in failure.tail


def test_failure_from_srun_when_tasks_crashed_after_success(tmp_path, monkeypatch):
    sub = fake_submission(tmp_path, outcomes={
        0: ("success", {}, "srun: error: node2: task 1: Aborted\n"),
        1: ("success", {}, "terminate called without an active exception\n")})
    monkeypatch.setattr(sub, "state", lambda: "FAILED")
    failure = sub.failure()
    assert (failure.task, failure.host) == (1, "node2")
    assert "terminate called" in failure.tail


def test_completed_job_has_no_failure(tmp_path, monkeypatch):
    sub = fake_submission(tmp_path, outcomes={0: ("success", {"a": 1}, ""), 1: ("success", {}, "")})
    monkeypatch.setattr(sub, "state", lambda: "COMPLETED")
    assert sub.failure() is None


def test_a_job_cancelled_by_fail_fast_reads_failed_in_every_later_wait(tmp_path, monkeypatch):
    # Task 0 failed, task 1 is still stuck: fail-fast cancels the job, and Slurm then says CANCELLED.
    # The job failed; result()'s own wait() after the submit command's must not call it cancelled
    # (seen in CI under load: "job 955 CANCELLED: task 2 on node3 failed").
    sub = fake_submission(tmp_path, outcomes={0: ("error", "Traceback", "error: model path not found: x\n")})
    answers = iter([[{"JobState": "RUNNING"}]])
    monkeypatch.setattr(handle.jobs, "job_records", lambda job: next(answers, [{"JobState": "CANCELLED"}]))
    monkeypatch.setattr(handle, "FAIL_FAST_S", 0)
    cancels = []
    monkeypatch.setattr(handle.subprocess, "run", lambda argv, **kw: cancels.append(argv))
    assert sub.wait(interval=0) == "FAILED"
    assert cancels == [["scancel", "4242"]]
    assert sub.wait(interval=0) == "FAILED"
    with pytest.raises(submission.JobFailed, match=r"^job 4242 FAILED: task 0 on node1 failed$"):
        sub.result()


def test_a_cancel_slurmgen_did_not_make_stays_cancelled(tmp_path, monkeypatch):
    sub = fake_submission(tmp_path, outcomes={0: ("error", "Traceback", "KeyboardInterrupt\n")})
    monkeypatch.setattr(handle.jobs, "job_records", lambda job: [{"JobState": "CANCELLED"}])
    assert sub.wait(interval=0) == "CANCELLED"


def test_results_of_an_older_job_with_the_same_id_are_ignored(tmp_path):
    sub = fake_submission(tmp_path, outcomes={0: ("error", "old", ""), 1: ("error", "old", "")})
    sub.submitted_at = time.time() + 60
    assert sub._outcomes() == {}


# ---------------------------------------------------------------------------- command line
def long_options(command) -> set:
    return {o for p in command.params if isinstance(p, click.Option) for o in p.opts + p.secondary_opts}


# submit does not offer what only a rendered script does (--launcher, --spares, ...): those cases are render's.
RENDER_ONLY = long_options(every_command()["render"]) - long_options(submit_command)
RENDER_CASES = [(args, message) for args, message in CASES
                if message is not None and not {a.split("=")[0] for a in args} & RENDER_ONLY]


@pytest.mark.parametrize("args,message", RENDER_CASES, ids=[" ".join(a) for a, _ in RENDER_CASES])
def test_bad_input_same_message_as_render_and_nothing_submitted(args, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(submission, "submit_job", pytest.fail)  # must not be reached
    result = CliRunner().invoke(submit_command, ["--folder", "sub", *args], catch_exceptions=False)
    assert result.exit_code == 2
    assert result.stderr == f"slurmgen: error: {message}\n"
    assert result.stdout == ""
    assert os.listdir(tmp_path) == []


def test_python_dash_m_bad_input(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "slurmgen.submit", "--nodes", "0"], cwd=tmp_path,
                          capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert proc.returncode == 2
    assert proc.stderr == "slurmgen: error: --nodes 0: must be a positive integer\n"
    assert os.listdir(tmp_path) == []


class StubSubmission:
    """Stands in for a submitted job in CLI tests."""

    job_id = "77"
    folder = Path("/tmp/sub")
    output_dir = None

    submitted_at = 1000.0

    def __init__(self, wait_raises=None, result=None, error=None, progress=None):
        self.wait_raises, self._result, self.error = wait_raises, result, error
        self.progress = progress  # newest progress.jsonl line, for the retry decision
        self.cancelled = False

    def status(self):
        return submission.Status("FAILED" if self.error else "COMPLETED", "0", self.progress)

    def crashed_host(self):
        return "node3"

    def hang_watch(self, timeout, nodes, printer=None):
        return None  # the real one reads heartbeats; tests/e2e/test_hangs.py runs it

    def wait(self, progress=None, interval=1.0, poll=None):
        if self.wait_raises:
            raise self.wait_raises
        progress(submission.Status("RUNNING", "0", {"step": 4, "max_steps": 8, "loss": 1.5}))
        progress(submission.Status("COMPLETED", "0", {"step": 8, "max_steps": 8, "loss": 1.25}))
        return "COMPLETED"

    def result(self):
        if self.error:
            raise self.error
        return self._result

    def metrics_file(self):
        return None

    def cancel(self):
        self.cancelled = True


MODEL = ("--", "--model_name_or_path", "m")  # train.sft without one is refused


def run_cli(monkeypatch, stub, args=("--gpus", "2"), **kwargs):
    monkeypatch.setattr(submission, "submit_job", lambda spec, folder, local=False: stub)
    return CliRunner().invoke(submit_command, [*args, *(() if "--" in args else MODEL)], catch_exceptions=False,
                              **kwargs)


def test_success_prints_progress_and_rank0_metrics(monkeypatch):
    result = run_cli(monkeypatch, StubSubmission(result={"world_size": 2, "train_loss": 1.3}))
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == "submitted job 77: 2 tasks on 1 nodes (2 GPUs)"
    assert any(l.startswith("[RUNNING   ] step 4/8 [") and "loss 1.5000" in l for l in lines)
    assert any(l.startswith("[COMPLETED ] step 8/8 [####") for l in lines)
    metrics = result.stdout.split("rank 0 metrics:\n", 1)[1].split("\nlogs:", 1)[0]
    assert json.loads(metrics) == {"world_size": 2, "train_loss": 1.3}


def test_detach_returns_at_once(monkeypatch):
    stub = StubSubmission(wait_raises=AssertionError("detach must not wait"))
    result = run_cli(monkeypatch, stub, args=("--detach", "--gpus", "2"))
    assert result.exit_code == 0
    assert result.stdout.splitlines() == ["submitted job 77: 2 tasks on 1 nodes (2 GPUs)",
                                          "submitit folder: /tmp/sub"]


def test_failed_job_exit_1_with_task_and_log_tail(monkeypatch, tmp_path):
    failure = blame.TaskFailure(3, "node3", tmp_path / "77_3_log.err", "error: model path not found: x")
    stub = StubSubmission(error=submission.JobFailed("77", "FAILED", failure))
    result = run_cli(monkeypatch, stub)
    assert result.exit_code == 1
    assert "slurmgen: job 77 FAILED: task 3 on node3 failed" in result.stderr
    # the task's own last lines, then why it is not submitted again (the rendered script's words)
    assert result.stderr.splitlines()[-2:] == [
        "error: model path not found: x",
        "slurmgen: no rank had begun training (train.heartbeat): not retrying a failure that would most likely"
        " happen again"]
    assert "Traceback" not in result.output


def test_a_crash_after_training_started_is_submitted_again(monkeypatch, tmp_path):
    """--max-failures: the job failed after a step of its own, so it is submitted again with the
    same spec, and the second crash on node3 adds node3 to --exclude (the partition still fits)."""
    from slurmgen.job import slurm

    failure = blame.TaskFailure(3, "node3", tmp_path / "77_3_log.err", "boom")
    crashed = lambda: StubSubmission(error=submission.JobFailed("77", "FAILED", failure),
                                     progress={"step": 6, "time": 2000.0})
    stubs = [crashed(), crashed(), StubSubmission(result={"world_size": 2})]
    specs = []

    def submit(spec, folder, local=False):
        specs.append(spec)
        return stubs[len(specs) - 1]

    monkeypatch.setattr(submission, "submit_job", submit)
    monkeypatch.setattr(slurm, "fits_without", lambda layout, partition, excluded: True)
    result = CliRunner().invoke(submit_command, ["--nodes", "2", "--gpus", "1", *MODEL], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "slurmgen: failure 1 of at most 2 (crash on node3): submitting again to resume from the newest" \
           " checkpoint\n" in result.stdout
    assert "slurmgen: failure 2 of at most 2 (crash on node3): submitting again to resume from the newest" \
           " checkpoint; excluding node3 (2nd failure there)" in result.stdout
    assert [s.exclude for s in specs] == [None, None, "node3"]


def test_a_crash_before_the_first_step_is_not_retried(monkeypatch, tmp_path):
    failure = blame.TaskFailure(3, "node3", tmp_path / "77_3_log.err", "error: model path not found: x")
    stub = StubSubmission(error=submission.JobFailed("77", "FAILED", failure), progress={"step": 2, "time": 10.0})
    result = run_cli(monkeypatch, stub)
    assert result.exit_code == 1 and "submitting again" not in result.output


@pytest.mark.parametrize("answer,cancelled", [("y\n", True), ("n\n", False)])
def test_ctrl_c_asks_whether_to_cancel(monkeypatch, answer, cancelled):
    stub = StubSubmission(wait_raises=KeyboardInterrupt())
    result = run_cli(monkeypatch, stub, input=answer)
    assert result.exit_code == 130
    assert "cancel job 77?" in result.stderr
    assert stub.cancelled is cancelled
    assert ("cancelled job 77" in result.stderr) is cancelled


# ---------------------------------------------------------------------------- local executor
PROBE = """
import json, os, sys
out = sys.argv[sys.argv.index("--out") + 1]
keys = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "PROBE")
with open(os.path.join(out, "rank%s.json" % os.environ["RANK"]), "w") as fh:
    json.dump({k: os.environ.get(k) for k in keys}, fh)
"""


@pytest.mark.timeout(120)
def test_local_two_processes_get_ranks(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "probe.py").write_text(PROBE)
    spec = JobSpec(gpus=(2,), script=str(tmp_path / "probe.py"), module=None,
                   env=(("PROBE", "yes"),), train_args=("--out", str(tmp_path))).validate()
    sub = submission.submit_job(spec, str(tmp_path / "sub"), local=True)
    assert sub.wait(interval=0.2, timeout=90) == "COMPLETED"
    assert sub.result() is None and sub.failure() is None
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [(r["RANK"], r["LOCAL_RANK"], r["WORLD_SIZE"]) for r in ranks] == [("0", "0", "2"), ("1", "1", "2")]
    assert {r["MASTER_ADDR"] for r in ranks} == {"127.0.0.1"}
    assert len({r["MASTER_PORT"] for r in ranks}) == 1
    assert {r["PROBE"] for r in ranks} == {"yes"}
    assert len(sub.log_files(1)) == 2 and "slurmgen-task: task 1" in sub.logs(rank=1)


# ---------------------------------------------------------------------------- options shared with render
def test_spec_from_args_is_the_cli_spec():
    from slurmgen.submit import spec_from_args

    spec = spec_from_args(["--nodes", "4", "--gpus", "1,1,2,2", "--offline", "--env", "HF_HUB_OFFLINE=0",
                           "--nccl-debug", "info", "--", "--output_dir", "run"])
    assert spec.gpus == (1, 1, 2, 2)
    assert spec.train_args == ("--output_dir", "run")
    env = dict(parameters.rank_environment(spec))
    assert env["HF_HUB_OFFLINE"] == "0"  # the user's --env wins over --offline
    assert env["HF_DATASETS_OFFLINE"] == "1"
    assert env["NCCL_DEBUG"] == "INFO"
    assert parameters.make_task(spec).env == parameters.rank_environment(spec)
    with pytest.raises(SpecError, match="--launcher accelerate"):
        spec_from_args(["--gpus", "2", "--launcher", "accelerate"])


def test_container_flags_go_to_srun(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec = JobSpec(gpus=(2,), container_image="nvcr.io/nvidia/pytorch:24.01-py3",
                   container_mounts="/data:/data", train_args=("--output_dir", "/scratch/run"))
    folder = tmp_path / "submitit"
    # submitit's folder holds the stop file; the working and output directories what training reads and writes.
    assert parameters.slurm_parameters(spec, folder)["srun_args"][-3:] == [
        "--container-image=nvcr.io/nvidia/pytorch:24.01-py3",
        f"--container-mounts=/data:/data,{tmp_path}:{tmp_path},{folder}:{folder},/scratch/run:/scratch/run",
        f"--container-workdir={tmp_path}"]


def test_apptainer_runs_every_task_in_the_image(fake_srun, tmp_path, monkeypatch):
    """--container apptainer:IMAGE on the submit path: submitit's command for Python (which it
    allows for singularity) becomes apptainer exec in the image; srun gets no pyxis flags."""
    from slurmgen.submit import spec_from_args

    monkeypatch.chdir(tmp_path)
    spec = spec_from_args(["--gpus", "2", "--container", "apptainer:/images/t.sif", "--", "--output_dir", "/scratch/run"])
    folder = tmp_path / "submitit"
    text = submission._executor(spec, folder, local=False)._make_submission_file_text(
        "python -m submitit.core._submit F", "uid")
    assert "--container-image" not in text
    executor = submission._executor(spec, folder, local=False)
    assert executor.python == (f"apptainer exec --nv --bind {tmp_path},{folder},/scratch/run --pwd {tmp_path}"
                               " /images/t.sif python3")


def test_submit_side_imports_no_training_stack(fake_srun, tmp_path):
    code = ("import sys\n"
            "from slurmgen.submit import command, parameters, submission, task\n"
            "from slurmgen.plan.spec import JobSpec\n"
            "parameters.make_task(JobSpec(gpus=(1, 1, 2, 2)))\n"
            "heavy = sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'transformers', 'trl', 'datasets'})\n"
            "print('heavy:', heavy, 'train' in sys.modules)\n")
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                            env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert result.stdout.strip() == "heavy: [] False", result.stderr


def test_offline_prefetches_like_render(monkeypatch):
    from slurmgen.site import prefetch

    fetched = []
    monkeypatch.setattr(prefetch, "prefetch", lambda spec, log: fetched.append(spec.train_args))
    result = run_cli(monkeypatch, StubSubmission(result={}),
                     args=("--detach", "--offline", "--", "--model_name_or_path", "org/model"))
    assert result.exit_code == 0, result.output
    assert fetched == [("--model_name_or_path", "org/model")]


def test_pending_reason_is_shown(monkeypatch):
    class Pending(StubSubmission):
        def wait(self, progress=None, interval=1.0, poll=None):
            progress(submission.Status("PENDING", "0", None, "PartitionNodeLimit"))
            return super().wait(progress, interval)

    result = run_cli(monkeypatch, Pending(result={}))
    assert "[PENDING   ] (waiting: PartitionNodeLimit)" in result.stdout.splitlines()


# ---------------------------------------------------------------------------- --attach
@pytest.mark.parametrize("args, message", [
    (["--attach", "12x"], "--attach '12x': not a Slurm job id (digits, as `--detach` printed)"),
    (["--attach", "12", "--nodes", "2"],
     "--attach 12: --nodes cannot be used with --attach, which follows a job already submitted"),
    (["--attach", "12", "--", "--max_steps", "3"],
     "--attach 12: training arguments cannot be used with --attach, which follows a job already submitted"),
    (["--attach", "12", "--detach"],
     "--attach 12: --detach or --local cannot be used with --attach, which follows a job already submitted"),
])
def test_attach_bad_input_is_one_line(args, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(submit_command, args)
    assert (result.exit_code, result.output) == (2, f"slurmgen: error: {message}\n")


def test_attach_to_a_job_not_submitted_here(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(submit_command, ["--attach", "77", "--log-dir", "elsewhere"])
    folder = tmp_path / "elsewhere" / "submitit"
    assert (result.exit_code, result.output) == (
        2, f"slurmgen: error: job 77 was not submitted through slurmgen into {folder} (no readable "
           "77_slurmgen.json; pass the submitit folder it printed with --folder)\n")


def test_attach_reads_what_submit_recorded(tmp_path):
    class FakeJob:
        job_id = "4242"

    sub = submission.Submission(FakeJob(), tmp_path, 6, tmp_path / "run", False, 1234.5)
    submission._write_record(sub)
    again = submission.attach("4242", tmp_path)
    assert (again.job_id, again.folder, again.world_size, again.output_dir, again.local, again.submitted_at) == (
        "4242", tmp_path, 6, tmp_path / "run", False, 1234.5)
    assert again._job.num_tasks == 6 and again._job.task(5).task_id == 5


def test_slurm_parameters_carry_the_options_of_real_training_scripts(tmp_path):
    """Issue 11's options on the submit path, as submitit writes them into its sbatch script."""
    from submitit.slurm.slurm import _make_sbatch_string

    spec = JobSpec(gpus=(1, 2), mem_per_gpu="16G", hint="nomultithread", reservation="maint",
                   mail_type="END,FAIL", mail_user="me@example.org", wait_all_nodes=True,
                   sbatch=("overcommit", "comment=run 7"), srun_args=("--cpu-bind=cores", "-l")).validate()
    params = parameters.slurm_parameters(spec)
    assert params["srun_args"][-2:] == ["--cpu-bind=cores", "-l"]
    text = _make_sbatch_string(command="true", folder=str(tmp_path),
                               **{k: v for k, v in params.items() if k != "srun_args"},
                               srun_args=params["srun_args"])
    for line in ("#SBATCH --mem-per-gpu=16G", "#SBATCH --hint=nomultithread", "#SBATCH --reservation=maint",
                 "#SBATCH --mail-type=END,FAIL", "#SBATCH --mail-user=me@example.org",
                 "#SBATCH --wait-all-nodes=1", "#SBATCH --overcommit", "#SBATCH --comment='run 7'"):
        assert line in text.splitlines()


@pytest.mark.parametrize("spec,message", [
    (JobSpec(gpus=(2,), launcher_args=("--tee=3",)),
     "--launcher-arg '--tee=3': python -m slurmgen.submit starts no launcher (one task per GPU);"
     " use --srun-arg for srun's own options"),
    (JobSpec(gpus=(2,), cpus_per_node=8),
     "--cpus-per-node 8: python -m slurmgen.submit starts one task per GPU; use --cpus-per-gpu"),
    (JobSpec(gpus=(2,), log_name="train-%j.log"),
     "--log-name 'train-%j.log': python -m slurmgen.submit writes submitit's logs"
     " (FOLDER/JOBID_TASK_log.out and .err); choose the folder with --folder"),
])
def test_submit_refuses_what_only_a_rendered_script_has(spec, message):
    with pytest.raises(SpecError) as err:
        parameters.check_submittable(spec)
    assert str(err.value) == message


def test_a_job_cancelled_after_a_hang_is_not_requeued(tmp_path, monkeypatch):
    """The hang watch marks the job before cancelling it: the cancel's TERM stops training as a
    preemption would, but the task then fails instead of requeueing (the hang is a counted failure)."""
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)
    handed_over = []
    marker = task.cancelled_file(tmp_path, "77")
    marker.parent.mkdir()  # the job's folder, where its ranks beat
    stop = task._StopOnSignal(tmp_path / "stop", True, 30, marker)
    stop.submitit_handler = lambda signum, frame: handed_over.append(signum)
    stop.finish({"stopped_early": True, "global_step": 9})
    assert handed_over == [stop.signum]  # not marked: a preemption, requeued
    marker.touch()
    with pytest.raises(task.TrainingFailed, match="^the job was cancelled after a hang; not requeueing it$"):
        stop.finish({"stopped_early": True, "global_step": 9})
    assert handed_over == [stop.signum]


def test_exec_target_runs_the_program_and_reports_its_status(tmp_path, monkeypatch):
    """--exec on the submit path: the program runs per rank; a non-zero status fails the task."""
    monkeypatch.chdir(tmp_path)
    ok = task.TrainTask(target=("exec", "sh"), train_args=("-c", "echo ran > out.txt"))
    stop = task._StopOnSignal(tmp_path / "stop", True, 60)
    assert ok._run(stop) is None and (tmp_path / "out.txt").read_text() == "ran\n"
    with pytest.raises(task.TrainingFailed, match="sh exited with status 3"):
        task.TrainTask(target=("exec", "sh"), train_args=("-c", "exit 3"))._run(stop)
    with pytest.raises(task.TrainingFailed, match="--exec no-such-program: No such file or directory"):
        task.TrainTask(target=("exec", "no-such-program"))._run(stop)


def test_an_exec_python_script_that_ended_then_aborted_in_its_exit_is_a_task_that_succeeded(tmp_path, monkeypatch,
                                                                                               capsys):
    """Issue 41: --exec python SCRIPT under the rank hooks; the script did its work, then C++ teardown aborted
    (as gloo's threads do: SIGABRT after every atexit handler). Its rank's end mark makes the task a
    success; a script that failed and then aborted still fails the task."""
    monkeypatch.chdir(tmp_path)
    for name, value in (("RANK", "1"), ("SLURMGEN_HEARTBEAT_DIR", str(tmp_path / "beats")), ("PYTHONPATH", "")):
        monkeypatch.setenv(name, value)
    task.install_rank_hooks(os.environ, "exec")
    abort_after_python = ("import ctypes\nlibc = ctypes.CDLL(None)\n"
                          "libc.__cxa_atexit(ctypes.cast(libc.abort, ctypes.c_void_p), None, None)\n")
    (tmp_path / "ok.py").write_text(abort_after_python + "print('work done')\n")
    (tmp_path / "bad.py").write_text(abort_after_python + "raise ValueError('bad batch')\n")
    stop = task._StopOnSignal(tmp_path / "stop", True, 60)
    assert task.TrainTask(target=("exec", sys.executable), train_args=("ok.py",))._run(stop) is None
    assert "slurmgen: rank 1 ended its script, then exit status -6 in Python's exit after that: the task" \
           " succeeded" in capsys.readouterr().out
    with pytest.raises(task.TrainingFailed, match="exited with status -6"):
        task.TrainTask(target=("exec", sys.executable), train_args=("bad.py",))._run(stop)


def test_a_train_py_in_the_working_directory_does_not_shadow_the_entry_points(tmp_path):
    """The seed's user keeps their own train.py where they submit; the submit path's task process
    (started with `python -m`, so that directory leads sys.path) still imports slurmgen's train.*,
    while a user's own module is imported as Python would, from that directory. (In a process of
    its own: importing train.* afresh here would leave two copies of its modules to other tests.)"""
    import subprocess

    (tmp_path / "train.py").write_text("raise SystemExit('the user train.py was imported')\n")
    (tmp_path / "mine.py").write_text("WHERE = 'the working directory'\n")
    code = ("import importlib.util, sys\n"
            "print(importlib.util.find_spec('train').origin)  # what a plain import would find\n"
            "from slurmgen.submit.task import import_entry_point\n"
            "print(import_entry_point('train.ddp_loop').__file__)\n"
            "print('' in sys.path, import_entry_point('mine').WHERE)\n")
    run = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parent.parent)))
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == [str(tmp_path / "train.py"),
                                       str(Path(__file__).resolve().parent.parent / "train" / "ddp_loop.py"),
                                       "True the working directory"]


def test_an_interface_prefix_becomes_this_nodes_exact_name_for_gloo():
    import socket

    name = sorted(n for _, n in socket.if_nameindex())[0]
    env = {}
    task.prepare_environ(env, (("NCCL_SOCKET_IFNAME", name[:1]),), 29999, None)
    assert env["GLOO_SOCKET_IFNAME"] == name
    env = {}
    task.prepare_environ(env, (("NCCL_SOCKET_IFNAME", "^docker,lo"),), 29999, None)
    assert "GLOO_SOCKET_IFNAME" not in env


def test_a_gpu_type_is_asked_per_task_and_two_types_are_refused():
    """--gpu-type on the submit path: one job of one task per GPU, so one typed request; a layout
    of two GPU types needs a het job (slurmgen render)."""
    params = parameters.slurm_parameters(JobSpec(gpus=(1, 2), gpu_type=("a100",)).validate())
    assert params["additional_parameters"]["gpus_per_task"] == "a100:1"
    assert parameters.slurm_parameters(JobSpec(gpus=(1, 2)))["additional_parameters"]["gpus_per_task"] == 1
    with pytest.raises(SpecError, match=r"^--gpu-type 'v100,a100': python -m slurmgen.submit asks for one kind"
                                        r" of GPU \(one job, one task per GPU\); give one type, or use slurmgen"
                                        r" render \(a het job\)$"):
        parameters.check_submittable(JobSpec(gpus=(1, 2), gpu_type=("v100", "a100")))
