"""slurmgen.run and the handles' job life, without Slurm: a function (defined in a script's __main__,
or in an importable module) run on three local ranks that join a gloo group from env:// and
all-reduce their ranks; a rank that raises fails the call with JobFailed naming it; bad options are
Job's one-line errors; rank R's log and the final cancel through the handle; slurmgen.attach finds
a rendered and a submitted job from the index. The same on the real cluster: tests/e2e/test_run_api.py."""
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import slurmgen
from slurmgen.job import index
from slurmgen.job.record import JobFiles
from slurmgen.observe.batch_job import BatchJob
from slurmgen.submit.handle import JobFailed, Submission

REPO = Path(__file__).resolve().parent.parent
MAIN_SCRIPT = textwrap.dedent("""
    import json, os, sys
    import slurmgen

    def all_reduce_rank(scale):
        import torch
        import torch.distributed as dist
        dist.init_process_group("gloo")  # from env://, as the docs say
        total = torch.tensor([dist.get_rank() * scale])
        dist.all_reduce(total)
        seen = {"sum": int(total), "world": dist.get_world_size(), "local_rank": os.environ["LOCAL_RANK"]}
        dist.destroy_process_group()
        return seen

    if __name__ == "__main__":
        print(json.dumps(slurmgen.run(all_reduce_rank, 10, nodes=1, gpus=[3], local=True, log_dir=sys.argv[1])))
""")


@pytest.fixture
def no_slurm(tmp_path, monkeypatch):
    """No Slurm on PATH (a cluster may run on this machine: these tests must not reach it), and an index of
    one's own. The ranks import this module as pytest does (test_run_api, from tests/): a function from a
    module travels by reference."""
    monkeypatch.setenv("PATH", str(Path(sys.executable).parent))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    paths = [str(REPO), str(REPO / "tests"), os.environ.get("PYTHONPATH")]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, paths)))


def fails_on_rank_one():
    if os.environ["RANK"] == "1":
        raise ValueError("rank one refuses")
    return "rank 0 done"


def says_hello():
    print(f"hello from rank {os.environ['RANK']} of {os.environ['WORLD_SIZE']}", flush=True)
    return int(os.environ["RANK"])


@pytest.mark.timeout(180)
def test_a_function_from_a_scripts_main_all_reduces_its_rank_on_three_local_ranks(tmp_path, no_slurm):
    """Defined in __main__, so it can only travel by value (cloudpickle): ranks 0+1+2, times 10."""
    (tmp_path / "job.py").write_text(MAIN_SCRIPT)
    done = subprocess.run([sys.executable, "job.py", str(tmp_path / "logs")], cwd=tmp_path, capture_output=True,
                          text=True, timeout=170)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"sum": 30, "world": 3, "local_rank": "0"}


@pytest.mark.timeout(180)
def test_a_rank_that_raises_fails_the_call_with_job_failed_naming_it(tmp_path, no_slurm, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(JobFailed) as raised:
        slurmgen.run(fails_on_rank_one, nodes=1, gpus=[2], local=True, log_dir=str(tmp_path / "logs"))
    assert re.fullmatch(r"job \d+ FAILED: task 1 on \S+ failed", str(raised.value))
    assert "ValueError: rank one refuses" in raised.value.failure.tail


@pytest.mark.parametrize("options, line", [
    (dict(nodes=2, gpus=[1, 2, 3]), "--gpus"),
    (dict(nodes=1, gpus=[2], script="train.py"), "script=...: slurmgen.run runs fn(*args) on every rank"),
    (dict(nodes=1, gpus=[2], args=["--lr", "1"]), "args=...: slurmgen.run runs fn(*args) on every rank"),
    (dict(nodes=1, gpus=[2], colour="red"), "colour"),
])
def test_bad_options_are_jobs_one_line_errors_and_nothing_is_written(tmp_path, no_slurm, options, line):
    with pytest.raises(slurmgen.JobError) as raised:
        slurmgen.run(says_hello, local=True, log_dir=str(tmp_path / "logs"), **options)
    assert line in str(raised.value) and "\n" not in str(raised.value)
    assert not (tmp_path / "logs").exists()


@pytest.mark.timeout(180)
def test_rank_r_s_log_through_the_handle_is_what_slurmgen_logs_rank_r_shows(tmp_path, no_slurm, monkeypatch):
    from slurmgen.job_api import Job
    from slurmgen.submit.function_task import FunctionTask
    from slurmgen.submit.parameters import make_task
    from slurmgen.submit.submission import submit_job

    monkeypatch.chdir(tmp_path)
    spec = Job(nodes=1, gpus=[3], log_dir=str(tmp_path / "logs")).spec
    sub = submit_job(spec, local=True, task=FunctionTask.of(make_task(spec, True), says_hello, (), False))
    assert sub.wait(interval=0.2, timeout=150) == "COMPLETED"
    assert sub.result() == 0  # rank 0's return value
    assert "hello from rank 2 of 3" in sub.logs(rank=2) and "hello from rank 1" not in sub.logs(rank=2)
    assert sub.log_files(2) == [sub.folder / f"{sub.job_id}_2_log.out", sub.folder / f"{sub.job_id}_2_log.err"]
    with pytest.raises(ValueError, match="--rank 3: job .* has ranks 0 to 2"):
        sub.logs(rank=3)


def test_attach_finds_a_rendered_job_and_a_submitted_one_from_the_index(tmp_path, no_slurm):
    """Slurm has forgotten both (no Slurm here): the handles still read their logs, and a cancel of a job
    that has ended marks nothing (a finished job must not read as cancelled)."""
    log = tmp_path / "logs" / "sft-77.out"
    log.parent.mkdir()
    log.write_text("[rank0]: step 1\n[rank3]: step 1 on node3\n[rank3]: step 2 on node3\n")
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\nTARGET=(-m train.sft --output_dir runs/one)\n")
    (tmp_path / "runs" / "one").mkdir(parents=True)
    (tmp_path / "runs" / "one" / "metrics.json").write_text('{"global_step": 6}')
    index.write(index.Entry("lab", "77", index.RENDERED, str(JobFiles.of(log.parent, "77").folder), [str(log)],
                            command=str(script), world_size=6))
    folder = tmp_path / "submitit"
    folder.mkdir()
    (folder / "78_slurmgen.json").write_text(json.dumps({"job_id": "78", "world_size": 3, "submitted_at": 1.0,
                                                          "output_dir": None}))
    (folder / "78_1_log.out").write_text("rank one's line\n")
    index.write(index.Entry("lab", "78", index.SUBMITTED, str(JobFiles.of(folder, "78").folder),
                            task_logs=str(folder / "78_{rank}_log"), world_size=3))

    rendered = slurmgen.attach("77")
    assert isinstance(rendered, BatchJob) and rendered.script == script
    assert rendered.logs(rank=3) == "[rank3]: step 1 on node3\n[rank3]: step 2 on node3\n"
    assert rendered.metrics() is None or rendered.metrics() == {"global_step": 6}
    assert rendered.cancel() == "job 77 has already ended: UNKNOWN"
    assert not JobFiles.of(log.parent, "77").cancel_mark()
    submitted = slurmgen.attach(78)
    assert isinstance(submitted, Submission) and submitted.world_size == 3 and submitted.folder == folder
    assert submitted.logs(rank=1) == "rank one's line\n"
    with pytest.raises(slurmgen.JobError, match="job 79: unknown"):
        slurmgen.attach("79")
    with pytest.raises(slurmgen.JobError, match="not a Slurm job id"):
        slurmgen.attach("last")
