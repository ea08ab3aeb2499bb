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
    (["--nodes", "4", "--gpus", "1,1,2,2", "--gpu-type", "a100,h100"],
     "--gpu-type 'a100,h100': give one GPU type (letters, digits, _ . -) for all nodes, or one per node (4)"),
    (["--nodes", "2", "--gpu-type", "a100:2"],
     "--gpu-type 'a100:2': give one GPU type (letters, digits, _ . -) for all nodes, or one per node (2)"),
    (["--gpus", "auto", "--world-size", "4", "--gpu-type", "a100"],
     "--gpu-type 'a100' with --gpus auto: auto picks among every GPU of the partition; give the layout"
     " (--gpus 1,1,2,2), or narrow the nodes with --constraint"),
    (["--resume", "auto", "--no-rank-hooks", "--script", __file__],
     "--resume auto: the rank hooks resume your Trainer; drop --no-rank-hooks"),
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
    # Hangs and retries (issue 12).
    (["--hang-timeout", "600"],
     "--hang-timeout 600: must be 0 (off) or fewer seconds than --collective-timeout 600, which would end a hang first"),
    (["--hang-timeout", "-1"],
     "--hang-timeout -1: must be 0 (off) or fewer seconds than --collective-timeout 600, which would end a hang first"),
    (["--max-failures", "-1"], "--max-failures -1: must be zero or more"),
    (["--save-timeout", "0"], "--save-timeout 0: must be a positive number of seconds"),
    # Spares (issue 31).
    (["--spares", "-1"], "--spares -1: must be zero or more"),
    (["--net-check-ratio", "1.5"], "--net-check-ratio 1.5: must be between 0 and 1 (a node below this share of the"
                                   " median bandwidth is slow)"),
    (["--net-min-gbps", "-2"], "--net-min-gbps -2: must be zero (no floor) or more"),
    (["--straggler-ratio", "1"], "--straggler-ratio 1: must be 0 (off) or more than 1 (times the median compute time)"),
    (["--straggler-ratio", "-1"], "--straggler-ratio -1: must be 0 (off) or more than 1 (times the median compute time)"),
    (["--straggler-window", "2"], "--straggler-window 2: must be 5 steps or more"),
    (["--nodes", "2", "--gpus", "2", "--gpu-type", "a100,h100", "--spares", "1"],
     "--spares 1: a spare stands in for any node, so the nodes must share one --gpu-type"),
    # Containers (issue 24).
    (["--container", "docker:img"], "--container 'docker:img': give RUNTIME:IMAGE with RUNTIME one of apptainer,"
                                    " singularity, pyxis, e.g. apptainer:/images/train.sif"),
    (["--container", "apptainer:/a.sif", "--container-image", "b"],
     "--container 'apptainer:/a.sif' and --container-image 'b': give one of them"),
    # The options of real training scripts (issue 11).
    (["--mem", "8G", "--mem-per-gpu", "16G"],
     "--mem '8G' and --mem-per-gpu '16G': choose one way to ask for memory"),
    (["--mem-per-gpu", "16GB"], "--mem-per-gpu '16GB': expected a size such as 64G, 512M or 0 (all)"),
    (["--mem-per-cpu", "0"], "--mem-per-cpu '0': must be more than zero"),
    (["--cpus-per-node", "0"], "--cpus-per-node 0: must be a positive integer"),
    (["--cpus-per-node", "8", "--launcher", "srun"],
     "--cpus-per-node 8: for the launchers with one agent per node (torchrun, accelerate);"
     " --launcher srun runs a task per GPU, use --cpus-per-gpu"),
    (["--hint", "fast"], "--hint 'fast': choose one of compute_bound, memory_bound, multithread, nomultithread"),
    (["--hint", "nomultithread", "--threads-per-core", "1"],
     "--hint 'nomultithread' and --threads-per-core 1: Slurm takes only one of them"),
    (["--threads-per-core", "0"], "--threads-per-core 0: must be a positive integer"),
    (["--reservation", "a b"], "--reservation 'a b': contains characters Slurm does not accept here"),
    (["--mail-type", "END,SOMETIMES"],
     "--mail-type 'END,SOMETIMES': 'SOMETIMES' is not one of NONE, BEGIN, END, FAIL, REQUEUE, ALL,"
     " INVALID_DEPEND, STAGE_OUT, TIME_LIMIT, TIME_LIMIT_90, TIME_LIMIT_80, TIME_LIMIT_50,"
     " ARRAY_TASKS (several: comma-separated)"),
    (["--mail-user", "me; rm -rf ~"], "--mail-user 'me; rm -rf ~': expected a user name or an address"),
    (["--log-name", "logs/%j.out"],
     "--log-name 'logs/%j.out': a file name (no /) on one line; the directory is --log-dir"),
    (["--log-name", "%q.out"],
     "--log-name '%q.out': unknown % pattern; Slurm's are %j (job id), %x (job name), %N (first node),"
     " %u (user), %A %a %J %n %s %t %b, %% for %"),
    (["--sbatch", "nodes=4"], "--sbatch 'nodes=4': slurmgen writes --nodes itself; use --nodes and --gpus"),
    (["--sbatch", "output=x.log"],
     "--sbatch 'output=x.log': slurmgen writes --output itself; use --log-dir and --log-name"),
    (["--sbatch", "signal=USR1@60"], "--sbatch 'signal=USR1@60': slurmgen writes --signal itself; use --grace"),
    (["--sbatch", "--overcommit"],
     "--sbatch '--overcommit': give the option without its dashes, e.g. --sbatch overcommit"),
    (["--sbatch", "wrap=hostname"],
     "--sbatch 'wrap=hostname': not an option slurmgen can pass on (the script is slurmgen's)"),
    (["--sbatch", "comment=a\nb"], "--sbatch 'comment=a\\nb': the value must be printable text on one line"),
    (["--srun-arg", "--ntasks=3"], "--srun-arg '--ntasks=3': slurmgen sets --ntasks itself; use --nodes and --gpus"),
    (["--srun-arg", "-c8"], "--srun-arg '-c8': slurmgen sets -c itself; use --cpus-per-gpu or --cpus-per-node"),
    (["--srun-arg", "--jobid=7"],
     "--srun-arg '--jobid=7': slurmgen sets --jobid itself; use nothing: the steps run in this job"),
    (["--srun-arg", "cores"],
     "--srun-arg 'cores': expected an option starting with - (a value follows its option, or write OPTION=VALUE)"),
    (["--launcher-arg", "--tee 3"],
     "--launcher-arg '--tee 3': one word each; write --launcher-arg=--tee=3 or give --launcher-arg twice"),
    (["--launcher-arg", "--nproc_per_node=8"],
     "--launcher-arg '--nproc_per_node=8': slurmgen sets --nproc_per_node itself; use --nodes and --gpus"),
    (["--launcher-arg", "--no-python"], "--launcher-arg '--no-python': slurmgen sets --no-python itself; use --exec"),
    (["--launcher", "accelerate", "--launcher-arg", "--num_processes=8"],
     "--launcher-arg '--num_processes=8': slurmgen sets --num_processes itself; use --nodes and --gpus"),
    (["--launcher", "srun", "--launcher-arg=--tee=3"],
     "--launcher-arg '--tee=3': --launcher srun starts no launcher; use --srun-arg for srun's own options"),
    (["--exec", "train", "--module", "train.ddp_loop"], "--module 'train.ddp_loop' and --exec 'train': choose one"),
    (["--exec", "-x"], "--exec '-x': a program name or path on one line"),
    # Issue 43: counts bounded, contradictions refused, paths that cannot be made, a warning at @0.
    (["--nodes", "99999999999999999999999"], "--nodes 99999999999999999999999: at most 65536 nodes"),
    (["--nodes", "2", "--gpus", "1x99999999999"], "--gpus '1x99999999999': '1x99999999999' is too large"),
    (["--gpus", "8x70000"], "--gpus '8x70000': more than 65536 nodes"),
    (["--gpus", "²"], "--gpus '²': '²' is not a positive integer GPU count"),
    (["--time", "9" * 5000], f"--time '{'9' * 5000}': not a Slurm time; use MINUTES, MM:SS, HH:MM:SS, D-HH, D-HH:MM"
                             " or D-HH:MM:SS"),
    (["--mem", "9" * 5000], f"--mem '{'9' * 5000}': expected a size such as 64G, 512M or 0 (all)"),
    (["--nodes", "2", "--nodelist", "node[1-2]", "--exclude", "node1"],
     "--nodelist 'node[1-2]' and --exclude 'node1': node1 in both; Slurm would never start the job"),
    (["--log-dir", "/proc/nope"], "--log-dir '/proc/nope': cannot create it: No such file or directory"),
    (["--log-dir", "/etc/passwd/x"], "--log-dir '/etc/passwd/x': cannot create it: Not a directory"),
    (["--nodelist", "9" * 5000], "--nodelist '99999999999999999999'...: a host name is at most 64 characters"),
    (["--setup-file", "a\0b"], "Invalid value for '--setup-file': 'a\\x00b': a file name has no NUL character"),
    (["--grace", "14"], "--grace 14: must be at least 15 seconds: the ranks checkpoint for 5 s at least after the"
                        " warning, and the requeue needs 10 s before the time limit"),
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


@pytest.mark.parametrize("release,option,message", [
    ((22, 5), "segment=4", "--sbatch 'segment=4': sbatch 22.05 has no option --segment"),
    ((22, 5), "overcomit", "--sbatch 'overcomit': sbatch 22.05 has no option --overcomit; did you mean overcommit?"),
    ((25, 11), "segment=4", None),
    (None, "power=low", None),  # no sbatch here: any release slurmgen knows
    ((25, 11), "power=low", "--sbatch 'power=low': sbatch 25.11 has no option --power"),
])
def test_sbatch_options_are_those_of_the_installed_release(release, option, message, render_args,
                                                          tmp_path, monkeypatch):
    from slurmgen.site import slurm_release

    monkeypatch.setattr(slurm_release, "installed", lambda: release)
    monkeypatch.chdir(tmp_path)
    result = render_args("render", "-o", "-", "--sbatch", option)
    if message is None:
        assert result.exit_code == 0, result.output
        assert f"#SBATCH --{option}\n" in result.stdout
    else:
        assert (result.exit_code, result.stderr) == (2, f"slurmgen: error: {message}\n")


@pytest.mark.parametrize("args,message", [
    (["submit", "--spares", "1"], "--spares is not an option of slurmgen submit; slurmgen render, check and fit take it"),
    (["fit", "--mail-user", "me@site"],
     "--mail-user is not an option of slurmgen fit; slurmgen render, check and submit take it"),
    (["submit", "--no-preflight"], "--no-preflight is not an option of slurmgen submit; slurmgen render and check take it"),
    (["render", "--bogus", "1"], "No such option '--bogus'. (Did you mean one of: '--gpus', '--qos'?)"),
])
def test_an_option_of_another_command_says_which_commands_take_it(args, message, render_args, tmp_path, monkeypatch):
    """Not click's guess from the command's own options (submit --spares: "Did you mean '--resume'?")."""
    monkeypatch.chdir(tmp_path)
    result = render_args(*args)
    assert (result.exit_code, result.stderr, result.stdout) == (2, f"slurmgen: error: {message}\n", "")
    assert os.listdir(tmp_path) == []
