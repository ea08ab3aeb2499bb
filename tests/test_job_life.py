"""A job's life after submission, without Slurm: the per-user index (written, found by cluster and id),
`slurmgen status`'s view of a job from Slurm's record and the job's folder, which files `slurmgen logs
--rank R` shows, following them until the job's end is recorded, the cancel mark the submit path's
ranks read, and the commands' one-line errors. The runtime's refusal to requeue a marked job is in
test_job_runtime.py; the commands against Slurm in tests/e2e/test_job_life.py."""
import io
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from slurmgen.job import index
from slurmgen.job.record import HANG_CANCEL, USER_CANCEL, JobFiles, JobRecord
from slurmgen.observe import job_life, job_logs
from slurmgen.site.jobs import parse_records


@pytest.fixture
def state_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    return tmp_path / "state"


def rendered(tmp_path, job_id="77", cluster="lab", started=1.0, world=6):
    log = tmp_path / "logs" / f"slurmgen-{job_id}.out"
    log.parent.mkdir(exist_ok=True)
    return index.Entry(cluster, job_id, index.RENDERED, str(JobFiles.of(log.parent, job_id).folder), [str(log)],
                       name="sft", command=str(tmp_path / "job.sh"), world_size=world, started=started)


def test_the_index_keeps_one_entry_per_cluster_and_job_id(tmp_path, state_home):
    """Job ids come back after a controller reset, and a user may have several clusters: each entry
    is keyed by both; an id is found on this cluster first, else the newest of that id anywhere."""
    index.write(rendered(tmp_path, "77", "lab", started=10.0))
    index.write(rendered(tmp_path, "77", "prod", started=20.0))
    index.write(rendered(tmp_path, "78", "lab", started=30.0))
    assert (state_home / "slurmgen" / "jobs" / "lab" / "77.json").is_file()
    assert index.find("77", "lab").cluster == "lab"
    assert index.find("77", "other").cluster == "prod"  # the newest 77
    assert index.find("79", "lab") is None
    assert [e.job_id for e in index.entries("lab")] == ["78", "77"]  # newest first
    again = rendered(tmp_path, "77", "lab", started=40.0)
    index.write(again)  # the id reused: the new job's entry replaces the old
    assert index.find("77", "lab").started == 40.0


def test_the_job_runtime_indexes_a_rendered_job_with_its_logs_and_keeps_its_first_start(tmp_path, state_home,
                                                                                        monkeypatch):
    """A relative --log-dir (the job's working directory) is written as a full path; a requeued run of
    the same job keeps the first start's time, so `list` orders jobs by when they began."""
    from slurmgen.job.command import index_entry
    from slurmgen.job.states import Job
    from slurmgen.runtime_spec import Component, RuntimeSpec

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SLURM_CLUSTER_NAME", "lab")
    spec = RuntimeSpec(6, (Component("c0", 2, 1, "component_0"), Component("c1", 2, 2, "component_1")), logs="logs")
    job = Job(spec, "77", JobFiles.of(spec.logs, "77"))
    record = parse_records(f"JobId=77 JobName=sft StdOut={tmp_path}/logs/sft-77.out StdErr={tmp_path}/logs/sft-77.out"
                           f" Command={tmp_path}/job.sh\n")[0]
    first = index_entry(job, {"SLURM_JOB_NAME": "sft"}, record)
    assert (first.cluster, first.kind, first.folder, first.logs, first.name, first.command, first.world_size) == (
        "lab", "rendered", str(tmp_path / "logs" / ".slurmgen-77"), [str(tmp_path / "logs" / "sft-77.out")], "sft",
        f"{tmp_path}/job.sh", 6)
    index.write(first)
    time.sleep(0.01)
    assert index_entry(job, {"SLURM_JOB_NAME": "sft"}, record).started == first.started  # the requeued run


def test_an_unwritable_index_never_fails_the_job(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("XDG_STATE_HOME", str(blocker))  # a file where the folder would be
    assert index.write(rendered(tmp_path)) is None


def test_a_submitted_jobs_rank_logs_are_submitits_own_files(tmp_path, state_home, monkeypatch):
    """The index names rank R's files as submitit writes them, so `logs --rank 3` opens task 3's."""
    from slurmgen.submit.handle import Submission
    from slurmgen.submit.submission import index_entry
    from slurmgen.submit.submitit_adapter import job_paths
    from slurmgen.submit.command import spec_from_args

    class Job:
        job_id = "91"
    sub = Submission(Job(), tmp_path / "submitit", 6, tmp_path / "out", local=False, submitted_at=5.0)
    spec = spec_from_args(["--nodes", "4", "--gpus", "1,1,2,2", "--", "--output_dir", "out"])
    monkeypatch.setenv("SLURM_CLUSTER_NAME", "lab")
    entry = index_entry(sub, spec)
    chosen = job_logs.select(entry, 3)
    assert chosen.paths == [job_paths(tmp_path / "submitit", "91", 3).stdout, job_paths(tmp_path / "submitit", "91", 3).stderr]
    assert entry.cluster == "lab" and entry.folder == str(tmp_path / "submitit" / ".slurmgen-91")
    assert entry.command == "-m train.sft --output_dir out" and entry.world_size == 6


def test_a_rendered_jobs_rank_is_its_labelled_lines_of_the_job_log(tmp_path):
    entry = rendered(tmp_path)
    Path(entry.logs[0]).write_text("slurmgen: job 77 on node1\n[rank3]:step 1\n[rank13]:not rank 3\n"
                                   "[rank0]:step 1\n[rank3]:Traceback (most recent call last):\n")
    out = io.StringIO()
    assert job_logs.follow(job_logs.select(entry, 3), lambda: True, out, once=True) == 2
    assert out.getvalue() == "[rank3]:step 1\n[rank3]:Traceback (most recent call last):\n"
    with pytest.raises(ValueError, match=r"^--rank 6: job 77 has ranks 0 to 5$"):
        job_logs.select(entry, 6)


def test_follow_prints_lines_as_they_come_and_stops_when_the_end_is_recorded(tmp_path):
    """A real writer: a job log growing line by line, then the job runtime's record saying it finished.
    Slurm has forgotten the job (no records): the record's end stops the follow, and every line written
    before it (the last one without its newline too) is printed."""
    entry = rendered(tmp_path)
    files = JobFiles(Path(entry.folder))
    files.folder.mkdir(parents=True)
    JobRecord(state="training").save(files.record)
    writer = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import time
        from slurmgen.job.record import JobRecord
        with open({entry.logs[0]!r}, "w") as log:
            for step in range(5):
                log.write(f"step {{step}}\\n"); log.flush(); time.sleep(0.2)
            log.write("the end, no newline"); log.flush()
        JobRecord(state="finished").save(__import__("pathlib").Path({str(files.record)!r}))
        """)])
    found = job_life.Found(entry, [])
    out = io.StringIO()
    started = time.monotonic()
    written = job_logs.follow(job_logs.select(entry, None), found.ended, out, interval=0.1)
    writer.wait(timeout=30)
    assert out.getvalue() == "".join(f"step {s}\n" for s in range(5)) + "the end, no newline\n"
    assert written == 6 and time.monotonic() - started < 60  # it ends with the job, not at its deadline


def test_a_requeued_job_is_followed_on_and_a_cancelled_one_has_ended(tmp_path):
    entry = rendered(tmp_path)
    files = JobFiles(Path(entry.folder))
    files.folder.mkdir(parents=True)
    JobRecord(state="requeued").save(files.record)
    found = job_life.Found(entry, [])
    assert not found.ended() and found.state() == "REQUEUED"
    files.mark_cancelled(USER_CANCEL)
    assert found.ended() and found.state() == "CANCELLED"
    running = job_life.Found(entry, parse_records("JobId=77 JobState=RUNNING Restarts=1\n"))
    assert not running.ended()  # Slurm's word first: the steps may still be ending


SCONTROL = ("JobId=77 HetJobId=77 HetJobOffset=0 JobName=sft JobState=PENDING Reason=Resources Restarts=2 "
            "NodeList=(null) WorkDir={work} StdOut={log}\n"
            "JobId=78 HetJobId=77 HetJobOffset=1 JobName=sft JobState=PENDING Reason=Resources Restarts=2 "
            "NodeList=(null) WorkDir={work} StdOut={log}\n")


def test_status_says_state_reason_step_loss_restarts_exclusions_and_logs(tmp_path):
    entry = rendered(tmp_path)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "progress.jsonl").write_text(json.dumps({"step": 12, "max_steps": 40, "loss": 2.5}) + "\n")
    (tmp_path / "job.sh").write_text("#!/bin/bash\nTARGET=(-m train.sft --output_dir out)\n")
    files = JobFiles(Path(entry.folder))
    files.folder.mkdir(parents=True)
    record = JobRecord(restarts=1, excluded=["node3"], state="requeued")
    record.begin_run(1.0, ["node1"])
    record.begin_run(2.0, ["node2"])
    record.save(files.record)
    found = job_life.Found(entry, parse_records(SCONTROL.format(work=tmp_path, log=entry.logs[0])))
    from slurmgen.life_commands import script_output_dir

    assert script_output_dir(entry, str(tmp_path)) == tmp_path / "out"  # the rendered script's --output_dir
    view = job_life.view(found, tmp_path / "out")
    assert {k: view[k] for k in ("state", "reason", "step", "max_steps", "loss", "restarts", "runs", "excluded")} == {
        "state": "PENDING", "reason": "Resources", "step": 12, "max_steps": 40, "loss": 2.5, "restarts": 2,
        "runs": 2, "excluded": ["node3"]}
    assert view["logs"] == entry.logs and view["kind"] == "rendered" and view["cancelled_by"] == ""
    text = job_life.human(view)
    assert text.splitlines()[0].startswith("job 77 (sft, rendered) [PENDING   ] restart 2 step 12/40 [")
    assert "loss 2.5000" in text and "  reason:    Resources" in text and "  excluded:  node3" in text
    assert f"  logs:      {entry.logs[0]}" in text
    json.dumps(view)  # --json prints it as it is


def test_a_pending_rendered_job_is_found_beside_its_log_before_the_runtime_indexed_it(tmp_path, state_home):
    log = tmp_path / "logs" / "slurmgen-77.out"
    log.parent.mkdir()
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\nexport SLURMGEN_RUNTIME_SPEC='{}'\n")
    records = parse_records(f"JobId=77 JobName=sft JobState=PENDING StdOut={log} Command={script}\n")
    found = job_life.locate("77", records, "lab")
    assert found.entry.kind == "rendered" and found.entry.folder == str(log.parent / ".slurmgen-77")
    submitted = parse_records(f"JobId=77 JobName=sft JobState=RUNNING StdOut={tmp_path}/submitit/77_0_log.out\n")
    (tmp_path / "submitit").mkdir()
    (tmp_path / "submitit" / "77_slurmgen.json").write_text("{}")  # what `submit` writes beside the logs
    entry = job_life.locate("77", submitted, "lab").entry
    assert (entry.kind, entry.task_logs) == ("submitted", f"{tmp_path}/submitit/77_{{rank}}_log")
    script.write_text("#!/bin/bash\nsrun hostname\n")  # not a slurmgen job
    with pytest.raises(job_life.LifeError, match=r"^job 77: not a slurmgen job \(neither your index nor its script"):
        job_life.locate("77", records, "lab")


def test_the_ranks_of_a_job_cancelled_by_slurmgen_cancel_stop_without_requeue_or_blame(tmp_path, capsys):
    """The submit path: at the cancel's TERM a rank stops as at a warning; with the user's mark its task
    neither calls submitit's requeueing handler nor fails as after a hang."""
    from slurmgen.submit import task

    marker = task.cancelled_file(tmp_path, "77")
    JobFiles.of(tmp_path, "77").mark_cancelled(USER_CANCEL)
    stop = task._StopOnSignal(tmp_path / "stop", True, 30, marker)
    handed_over = []
    stop.submitit_handler = lambda signum, frame: handed_over.append(signum)
    stop._requeue(stop.signum)
    assert handed_over == [] and "the job was cancelled (scancel): stopped, not requeueing it" in capsys.readouterr().err
    assert JobFiles.of(tmp_path, "77").cancel_mark() == USER_CANCEL
    marker.write_text("")  # the hang watch's mark of older versions: a hang
    assert JobFiles.of(tmp_path, "77").cancel_mark() == HANG_CANCEL


def slurmgen(tmp_path, *args):
    """The command with no Slurm on PATH."""
    empty = tmp_path / "bin"
    empty.mkdir(exist_ok=True)
    env = {**os.environ, "PATH": str(empty), "XDG_STATE_HOME": str(tmp_path / "state")}
    return subprocess.run([sys.executable, "-m", "slurmgen", *args], capture_output=True, text=True, env=env)


def test_logs_of_an_indexed_job_need_no_slurm(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    folder = tmp_path / "submitit"
    folder.mkdir()
    index.write(index.Entry("slurm", "91", index.SUBMITTED, str(folder / ".slurmgen-91"),
                            task_logs=str(folder / "91_{rank}_log"), world_size=6, started=1.0))
    (folder / "91_3_log.out").write_text("rank 3 says hello\n")
    (folder / "91_3_log.err").write_text("rank 3 warns\n")
    JobFiles.of(folder, "91").folder.mkdir()
    run = slurmgen(tmp_path, "logs", "91", "--rank", "3")
    assert (run.returncode, run.stdout, run.stderr) == (0, "rank 3 says hello\nrank 3 warns\n", "")
    run = slurmgen(tmp_path, "logs", "91", "--rank", "6")
    assert (run.returncode, run.stderr) == (2, "slurmgen: error: --rank 6: job 91 has ranks 0 to 5\n")


@pytest.mark.parametrize("args,line", [
    (["status", "77"], "slurmgen: error: no Slurm here: scontrol is not on PATH (run this where you submit jobs)"),
    (["cancel", "77"], "slurmgen: error: no Slurm here: scontrol is not on PATH (run this where you submit jobs)"),
    (["list"], "slurmgen: error: no Slurm here: scontrol is not on PATH (run this where you submit jobs)"),
    (["logs", "12x"], "slurmgen: error: JOB '12x': not a Slurm job id; give its number (1234), as sbatch or submit"
                      " printed it"),
])
def test_bad_ids_and_no_slurm_are_one_line_and_exit_2(tmp_path, args, line):
    run = slurmgen(tmp_path, *args)
    assert (run.returncode, run.stdout, run.stderr) == (2, "", line + "\n")


def test_an_unknown_job_is_one_line(tmp_path):
    run = slurmgen(tmp_path, "logs", "4242")
    assert run.returncode == 2 and run.stderr.startswith("slurmgen: error: job 4242: unknown: neither Slurm nor")
    assert len(run.stderr.splitlines()) == 1
