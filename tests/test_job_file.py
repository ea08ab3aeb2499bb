"""Issue 44, item 4: the job file. `render -f FILE` of what `--show-config` printed writes the same
script byte for byte; options given on the command line win over the file, the file over a profile;
an unknown key, a wrong type or a bad value is one line naming the key and its value, exit 2, and
nothing is written."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from slurmgen import job_file
from slurmgen.options import ENTRIES

pytestmark = pytest.mark.unit
REPO = Path(__file__).resolve().parent.parent

LAYOUTS = {
    "uneven_1_1_2_2": ["--nodes", "4", "--gpus", "1,1,2,2"],
    "uniform_4x2": ["--nodes", "4", "--gpus", "2", "--partition", "gpu", "--time", "1-00:00:00"],
    "script_with_args": ["--nodes", "4", "--gpus", "1,1,2,2", "--script", "train.py", "--time", "2:00:00",
                         "--env", "HF_HOME=/shared/hf cache", "--setup", "module load cuda", "--no-preflight",
                         "--srun-arg=--cpu-bind=cores", "--net-check-ratio", "0.25", "--",
                         "--max_steps", "100", "--output_dir", "runs/it's here"],
    "srun_exec": ["--nodes", "2", "--gpus", "2", "--launcher", "srun", "--exec", "/opt/bin/train", "--mem-per-cpu",
                  "4G", "--master-addr-ip", "--job-name", "jöb \"quoted\"", "--sbatch", "comment=run 7"],
}


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("print('training')\n")
    return tmp_path


def _split(args):
    return (args[:args.index("--")], args[args.index("--"):]) if "--" in args else (args, [])


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_render_from_the_shown_config_gives_the_same_script(render_args, workdir, name):
    options, train = _split(LAYOUTS[name])
    assert render_args("render", "-o", "job.sh", *options, *train).exit_code == 0
    first = (workdir / "job.sh").read_bytes()
    shown = render_args("render", "-o", "job.sh", "--show-config", *options, *train)
    assert shown.exit_code == 0, shown.output
    job_file = workdir.parent / f"{workdir.name}.toml"  # outside the script's folder: not in its code snapshot
    job_file.write_text(shown.stdout)
    (workdir / "job.sh").unlink()
    again = render_args("render", "-f", str(job_file), "-o", "job.sh")
    assert again.exit_code == 0, again.output
    assert (workdir / "job.sh").read_bytes() == first


def test_render_reads_the_file_through_process_substitution(workdir):
    """As a user types it: slurmgen render -f <(slurmgen render --show-config ...)."""
    options, train = _split(LAYOUTS["script_with_args"])
    line = " ".join(f"'{w}'" if "'" not in w else '"' + w + '"' for w in [*options, *train])
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    slurmgen = f"{sys.executable} -m slurmgen"
    script = (f"{slurmgen} render -o job.sh {line} >/dev/null && mv job.sh first.sh && "
              f"{slurmgen} render -o job.sh -f <({slurmgen} render -o job.sh --show-config {line}) >/dev/null")
    run = subprocess.run(["bash", "-c", script], cwd=workdir, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert (workdir / "job.sh").read_bytes() == (workdir / "first.sh").read_bytes()


def test_the_shown_config_pins_only_what_was_chosen(render_args, workdir):
    shown = render_args("render", "--show-config", "--nodes", "4", "--gpus", "1,1,2,2", "--", "--max_steps", "5")
    live = [line for line in shown.stdout.splitlines() if not line.startswith("#")]
    assert [line.split(" # ")[0].strip() for line in live] == ['nodes = 4', 'gpus = "1,1,2,2"',
                                                               'args = ["--max_steps", "5"]']
    assert all(line.endswith("# command line") for line in live)
    assert '# job-name = "slurmgen"' in shown.stdout  # a default: shown, commented


def test_command_line_options_win_over_the_file(render_args, workdir):
    (workdir / "job.toml").write_text('nodes = 4\ngpus = [1, 1, 2, 2]\njob-name = "from-file"\n'
                                      'env = {HF_HOME = "/shared/hf"}\nargs = ["--max_steps", "100"]\n')
    result = render_args("render", "-f", "job.toml", "-o", "-", "--gpus", "2", "--", "--max_steps", "7")
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert "hetjob" not in text and "#SBATCH --nodes=4" in text  # --gpus 2 over the file's 1,1,2,2
    assert "#SBATCH --job-name=from-file" in text and "HF_HOME" in text
    assert "--max_steps 7" in text and "100" not in text.split("# Layout")[0]


def test_the_file_wins_over_a_profile(render_args, workdir):
    (workdir / "slurmgen.toml").write_text('[default]\npartition = "debug"\nqos = "low"\n')
    (workdir / "job.toml").write_text('partition = "gpu"\n')
    for first, second in ((["-f", "job.toml"], ["--profile", "default"]), (["--profile", "default"], ["-f", "job.toml"])):
        result = render_args("render", *first, *second, "-o", "-")
        assert result.exit_code == 0, result.output
        assert "#SBATCH --partition=gpu" in result.stdout and "#SBATCH --qos=low" in result.stdout


@pytest.mark.parametrize("content,line", [
    ("nodez = 4\n", "job.toml: nodez = 4: no such option; did you mean 'nodes'? the keys are the long options"),
    ('nodes = "four"\n', 'job.toml: nodes = "four": give a whole number, as --nodes takes'),
    ("exclusive = 1\n", "job.toml: exclusive = 1: give true or false, as --exclusive takes"),
    ('launcher = "mpirun"\n', 'job.toml: launcher = "mpirun": give one of "torchrun", "srun", "accelerate"'),
    ('gpus = ["one"]\n', 'job.toml: gpus = ["one"]: give a string (or a list of whole numbers, one per node)'),
    ('args = "--max_steps 5"\n', 'job.toml: args = "--max_steps 5": give the training arguments as a list'),
    ("env = [1, [2]]\n", "job.toml: env = [1, [2]]: give a string or a list of strings (as repeated --env)"),
    ("nodes = 0\n", "--nodes 0: must be a positive integer"),
    ('nodes = 2\ngpus = "1,1,2"\n', "--gpus '1,1,2': 3 counts given for --nodes 2; give one count per node"),
    ('nodes = 4\nnodes = 5\n', "job.toml: Cannot overwrite a value (at line 2, column 10)"),
    ("[default]\nnodes = 4\n", 'job.toml: default = {"nodes" = 4}: no such option'),
])
def test_a_bad_key_or_value_is_one_line_and_nothing_is_written(render_args, workdir, content, line):
    (workdir / "job.toml").write_text(content)
    result = render_args("render", "-f", "job.toml", "-o", "job.sh")
    assert result.exit_code == 2
    assert result.stderr.startswith(f"slurmgen: error: {line}"), result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert not (workdir / "job.sh").exists() and not (workdir / "logs").exists()


def test_a_missing_file_is_one_line(render_args, workdir):
    result = render_args("render", "-f", "nope.toml")
    assert result.exit_code == 2 and result.stderr.count("\n") == 1
    assert "nope.toml" in result.stderr and "No such file" in result.stderr


def test_submit_refuses_a_key_only_a_rendered_script_honours():
    found = job_file.values(ENTRIES, {"nodes": 2, "launcher": "srun", "spares": 0}, "job.toml: ")
    with pytest.raises(job_file.SpecError, match=r'^job.toml: launcher = "srun": slurmgen submit does not take'
                                                 r' --launcher'):
        job_file.for_command(ENTRIES, found, "submit", "job.toml: ")
    # a key left at its default is no promise broken; fit takes the layout and the memory only
    assert job_file.for_command(ENTRIES, {"spares": 0, "nodes": 2}, "submit", "") == {"nodes": 2}
    assert job_file.for_command(ENTRIES, found, "fit", "") == {"nodes": 2, "spares": 0}


def test_the_shown_config_says_which_values_came_from_the_file(render_args, workdir):
    (workdir / "job.toml").write_text('nodes = 4\ngpus = "1,1,2,2"\n')
    shown = render_args("render", "-f", "job.toml", "--gpus", "2", "--show-config")
    lines = {line.split(" = ")[0]: line for line in shown.stdout.splitlines()}
    assert lines["nodes"].endswith("# job file job.toml")
    assert lines["gpus"].startswith('gpus = "2"') and lines["gpus"].endswith("# command line")
