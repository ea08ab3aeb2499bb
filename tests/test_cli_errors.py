"""Bad input: one line naming the value and what is allowed, exit 2, no traceback, no file."""
import os

import pytest

CASES = [
    (["--nodes", "4", "--gpus", "1,1,2"],
     "--gpus '1,1,2': 3 counts given for --nodes 4; give one count per node or a single count for all"),
    (["--nodes", "2", "--gpus", "1,x"], "--gpus '1,x': 'x' is not a positive integer GPU count"),
    (["--nodes", "2", "--gpus", "0"], "--gpus '0': '0' is not a positive integer GPU count"),
    (["--nodes", "2", "--gpus", "1,-2"], "--gpus '1,-2': '-2' is not a positive integer GPU count"),
    (["--nodes", "0"], "--nodes 0: must be a positive integer"),
    (["--nodes", "-3"], "--nodes -3: must be a positive integer"),
    (["--time", "1:2:3:4"],
     "--time '1:2:3:4': not a Slurm time; use MINUTES, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS"),
    (["--env", "NOEQUALS"], "--env 'NOEQUALS': expected KEY=VALUE"),
    (["--env", "1BAD=x"],
     "--env '1BAD=x': '1BAD' is not a valid variable name (letters, digits and _, not starting with a digit)"),
    (["--launcher", "mpirun"],
     "Invalid value for '--launcher': 'mpirun' is not one of 'torchrun', 'srun', 'accelerate'."),
    (["-o", "missing-dir/job.sh"], None),
    (["--nodes", "4", "--gpus", "1,1,2,2", "--launcher", "accelerate"],
     "--launcher accelerate cannot run the uneven layout 1,1,2,2: accelerate starts"
     " num_processes // num_machines processes on every node; use --launcher torchrun"),
    (["--script", "no_such_script.py"], "--script 'no_such_script.py': no such file"),
    (["--nodes", "2", "--nodelist", "node[1-3]"],
     "--nodelist 'node1,node2,node3': names 3 nodes for --nodes 2; give exactly one host per node"),
    (["--time", "2", "--grace", "300"], "--time '2': must be longer than the --grace period of 300 s"),
    (["--job-name", "a\tb"], "--job-name 'a\\tb': must be non-empty printable text on one line"),
]


@pytest.mark.parametrize("args,message", CASES, ids=[" ".join(a) for a, _ in CASES])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(args, message, render_args, tmp_path,
                                                         monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = render_args("render", *args)
    if message is None:  # the path is absolute in the message
        message = (f"-o 'missing-dir/job.sh': directory '{tmp_path}/missing-dir' does not exist")
    assert result.exit_code == 2
    assert result.stderr == f"slurmgen: error: {message}\n"
    assert result.stdout == ""
    assert os.listdir(tmp_path) == []


def test_good_render_writes_executable_script_and_log_dir(render_args, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = render_args("render", "--nodes", "4", "--gpus", "1,1,2,2", "--log-dir", "out/logs")
    assert result.exit_code == 0, result.output
    script = tmp_path / "generated.sh"
    assert os.access(script, os.X_OK)
    assert (tmp_path / "out" / "logs").is_dir()
    assert "world size 6" in result.stdout
    assert "ranks per node: 0 | 1 | 2,3 | 4,5" in result.stdout
    assert "submit with: sbatch generated.sh" in result.stdout
    assert sorted(os.listdir(tmp_path)) == ["generated.sh", "out"]


def test_stdout_output_keeps_summary_off_stdout(render_args, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = render_args("render", "-o", "-", "--nodes", "2", "--gpus", "2")
    assert result.exit_code == 0
    assert result.stdout.startswith("#!/bin/bash\n")
    assert "world size 4" in result.stderr
