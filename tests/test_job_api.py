"""Issue 44, item 1 (first half): slurmgen.Job, built from the options' one declaration. It renders
byte for byte what `slurmgen render` writes for the same values, reads and writes the job file, and
a bad value raises JobError whose message is the command line's error line."""
import json
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import slurmgen
from slurmgen.observe.batch_job import BatchJob

pytestmark = pytest.mark.unit
REPO = Path(__file__).resolve().parent.parent

# (command line, the same job as Job keywords)
SAME_JOBS = {
    "uneven_1_1_2_2": (["--nodes", "4", "--gpus", "1,1,2,2"], dict(nodes=4, gpus=[1, 1, 2, 2])),
    "uniform_4x2": (["--nodes", "4", "--gpus", "2", "--partition", "gpu", "--time", "2:00:00"],
                    dict(nodes=4, gpus=2, partition="gpu", time="2:00:00")),
    "script_with_args": (["--nodes", "4", "--gpus", "1,1,2,2", "--script", "train.py", "--time", "2:00:00",
                          "--env", "HF_HOME=/shared/hf cache", "--no-preflight", "--srun-arg=--cpu-bind=cores",
                          "--", "--max_steps", "100", "--output_dir", "runs/it's here"],
                         dict(nodes=4, gpus=[1, 1, 2, 2], script="train.py", time="2:00:00",
                              env={"HF_HOME": "/shared/hf cache"}, preflight=False, srun_arg=["--cpu-bind=cores"],
                              args=["--max_steps", 100, "--output_dir", "runs/it's here"])),
    "srun_module": (["--nodes", "2", "--gpus", "4,2", "--launcher", "srun", "--module", "train.ddp_loop",
                     "--max-restarts", "0", "--net-check-ratio", "0.25"],
                    dict(nodes=2, gpus="4,2", launcher="srun", module="train.ddp_loop", max_restarts=0,
                         net_check_ratio=0.25)),
}


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("print('training')\n")
    return tmp_path


def _quiet(step):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # render's warnings (no model given) are not what is compared
        return step()


@pytest.mark.parametrize("name", sorted(SAME_JOBS))
def test_a_job_renders_what_the_command_line_renders(render_args, workdir, name):
    argv, keywords = SAME_JOBS[name]
    printed = render_args("render", "-o", "-", *argv)
    assert printed.exit_code == 0, printed.output
    job = slurmgen.Job(**keywords)
    assert _quiet(job.render) == printed.stdout
    assert render_args("render", "-o", "job.sh", *argv).exit_code == 0
    written = (workdir / "job.sh").read_bytes()
    (workdir / "job.sh").unlink()
    assert str(_quiet(lambda: job.write("job.sh"))) == "job.sh"
    assert (workdir / "job.sh").read_bytes() == written
    assert (workdir / "logs").is_dir()  # Slurm opens the log before the job starts


def test_the_job_file_round_trips(render_args, workdir):
    argv, keywords = SAME_JOBS["script_with_args"]
    shown = render_args("render", "-o", "-", "--show-config", *argv)
    (workdir / "shown.toml").write_text(shown.stdout)
    job = slurmgen.Job(**keywords)
    assert _quiet(slurmgen.Job.from_file("shown.toml").render) == _quiet(job.render)
    (workdir / "own.toml").write_text(job.config())
    assert _quiet(slurmgen.Job.from_file("own.toml").render) == _quiet(job.render)
    fewer = slurmgen.Job.from_file("own.toml", gpus=2, time=None, args=["--max_steps", "7"])  # keywords win
    assert fewer.gpus == "2" and fewer.args == ("--max_steps", "7") and fewer.script == "train.py"
    assert fewer.time is None  # None: the option's default, as if the file did not set it
    assert "hetjob" not in _quiet(fewer.render)


@pytest.mark.parametrize("argv,keywords", [
    (["--nodes", "0"], dict(nodes=0)),
    (["--nodes", "2", "--gpus", "1,x"], dict(nodes=2, gpus="1,x")),
    (["--nodes", "2", "--gpus", "1,1,2"], dict(nodes=2, gpus=[1, 1, 2])),
    (["--script", "missing.py"], dict(script="missing.py")),
    (["--env", "NOEQUALS"], dict(env=["NOEQUALS"])),
    (["--port-range", "30000-20000"], dict(port_range="30000-20000")),
])
def test_a_bad_value_raises_the_command_lines_error_line(render_args, workdir, argv, keywords):
    result = render_args("render", "-o", "job.sh", *argv)
    assert result.exit_code == 2
    with pytest.raises(slurmgen.JobError) as raised:
        slurmgen.Job(**keywords)
    assert f"slurmgen: error: {raised.value}\n" == result.stderr


@pytest.mark.parametrize("keywords,message", [
    (dict(nodez=4), "nodez = 4: no such option; did you mean 'nodes'?"),
    (dict(nodes="four"), 'nodes = "four": give a whole number, as --nodes takes'),
    (dict(launcher="mpirun"), 'launcher = "mpirun": give one of "torchrun", "srun", "accelerate"'),
    (dict(args="--max_steps 5"), 'args = "--max_steps 5": give the training arguments as a list of strings'),
])
def test_a_bad_keyword_is_one_line_naming_it(workdir, keywords, message):
    with pytest.raises(slurmgen.JobError, match="^" + message.replace("?", r"\?")):
        slurmgen.Job(**keywords)


def test_one_exception_type_for_every_refusal(workdir):
    job = slurmgen.Job(nodes=2, gpus=2)
    for step in (lambda: job.submit(via="ssh"), lambda: job.write(workdir / "no" / "dir" / "job.sh"),
                 lambda: slurmgen.Job.from_file("missing.toml")):
        with pytest.raises(slurmgen.JobError) as raised:
            _quiet(step)
        assert "\n" not in str(raised.value)
    assert not (workdir / "no").exists() and not (workdir / "logs").exists()  # nothing left behind


def test_a_script_may_go_into_the_log_directory_it_makes(workdir):
    """submit(via="sbatch") writes LOG_DIR/JOB_NAME.sh by default: the directory is made first."""
    job = slurmgen.Job(nodes=2, gpus=2, log_dir="out/logs", job_name="small")
    _quiet(lambda: job.write("out/logs/small.sh"))
    assert (workdir / "out" / "logs" / "small.sh").read_text() == _quiet(job.render).replace(
        "# Command: slurmgen render ", "# Command: slurmgen render -o out/logs/small.sh ", 1)


def test_a_batch_jobs_metrics_are_rank_0s_metrics_json(tmp_path):
    handle = BatchJob("7", tmp_path / "job.sh", tmp_path / "run")
    assert handle.metrics() is None  # not written yet
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "metrics.json").write_text(json.dumps({"global_step": 8, "world_size": 6}))
    assert handle.metrics() == {"global_step": 8, "world_size": 6}


def test_import_slurmgen_stays_light():
    code = ("import sys, slurmgen\n"
            "print(sorted({'click', 'jinja2', 'slurmgen.options', 'slurmgen.job_api'} & set(sys.modules)))\n"
            "slurmgen.Job\n"
            "print('slurmgen.job_api' in sys.modules)\n")
    run = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert run.stdout.split("\n")[:2] == ["[]", "True"], run.stderr
