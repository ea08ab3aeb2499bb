"""Issue 43: what render, check and submit accept does not fail after the queue wait. Each value that
would is refused before anything is written: one line, exit 2, no traceback, no file (site/vet.py)."""
import os
import re
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

DDP = ["--module", "train.ddp_loop", "--", "--model_name_or_path", "m", "--dataset", "d", "--output_dir", "o"]


def refused(result, message: str, where: Path) -> None:
    assert (result.exit_code, result.stderr, result.stdout) == (2, f"slurmgen: error: {message}\n", "")
    assert os.listdir(where) == []


def fake_bin(tmp_path: Path, name: str, body: str) -> Path:
    """A stand-in program first on PATH."""
    bin_dir = tmp_path.parent / f"{tmp_path.name}-bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / name).write_text(f"#!/bin/bash\n{body}\n")
    (bin_dir / name).chmod(0o755)
    return bin_dir


# ------------------------------------------------------------------ item 1: accepted, broken later
def test_setup_line_that_bash_cannot_parse_is_refused(render_args, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = render_args("render", "--setup", "module load cuda; echo \"x")
    refused(result, "--setup 'module load cuda; echo \"x': not a shell line bash can parse"
                    " (line 1: unexpected EOF while looking for matching `\"')", tmp_path)


def _children() -> set:
    """This process's child processes, as the kernel lists them."""
    pid = os.getpid()
    return {int(child) for task in os.listdir(f"/proc/{pid}/task")
            for child in Path(f"/proc/{pid}/task/{task}/children").read_text().split()}


def test_the_bash_that_parses_the_script_starts_with_the_vetting(tmp_path):
    """Started before the script is rendered (its start costs a render nothing), given the script
    later: it refuses a bad --setup there as at once, passes a good script, and is reaped."""
    from slurmgen.plan.spec import JobSpec
    from slurmgen.plan.words import SpecError
    from slurmgen.site import vet

    spec = JobSpec(gpus=(1,), setup=("fi",), log_dir=str(tmp_path)).validate()
    vetting = vet.start(spec, ask_cluster=False, scripts=True)
    bash = vetting.parse.bash
    assert bash.pid in _children() and bash.returncode is None  # waiting for the script
    with pytest.raises(SpecError, match=r"^--setup 'fi': not a shell line bash can parse \(line 1: syntax error near"
                                        r" unexpected token `fi'\)$"):
        vetting.judge(["#!/bin/bash\nfi\n"])
    assert bash.returncode == 2 and vetting.parse is None

    vetting = vet.start(JobSpec(gpus=(1,), log_dir=str(tmp_path)).validate(), ask_cluster=False, scripts=True)
    bash = vetting.parse.bash
    vetting.judge(["#!/bin/bash\necho 'fine'\n"], places=False)
    assert bash.returncode == 0 and bash.pid not in _children()


def test_a_vetting_with_no_script_after_all_leaves_no_bash(tmp_path):
    """A Job whose render stops between the vetting's start and the script (a sweep of het jobs is
    several scripts: refused) ends the bash started for it."""
    import slurmgen

    before = _children()
    with pytest.raises(slurmgen.JobError, match="several scripts"):
        slurmgen.Job(nodes=2, gpus=1, prep=True, log_dir=str(tmp_path),
                     args=["--model_name_or_path", "m", "--dataset_name", "d", "--output_dir", "o"]).render()
    assert _children() - before == set()  # no new one left (an older one may end meanwhile)


SINFO = "node1|gpu*|gpu:1|idle|16|none|128000\nnode2|gpu*|gpu:1|idle|16|none|128000\n" \
        "node3|gpu*|gpu:2|idle|32|none|128000\nnode4|gpu*|gpu:2|idle|32|none|128000\n"
ARGS_FAIL = "result: the layout can run, but the training arguments would fail on every rank after the queue wait"


@pytest.fixture
def cluster_here(monkeypatch, tmp_path):
    """`check` against a fixed 1,1,2,2 cluster: no sinfo, no sbatch --test-only asked; a fresh
    cache of accepted arguments; the working directory is tmp_path."""
    from datetime import datetime

    from slurmgen.site import cluster, estimate, limits

    monkeypatch.setattr(cluster, "query", lambda: cluster.ClusterInfo("slurm 22.05.8", *cluster.parse_sinfo(SINFO)))
    monkeypatch.setattr(estimate, "ask", lambda script: estimate.Estimate(datetime.now(), "node[1-4]"))
    monkeypatch.setattr(limits, "Asking", limits.NoAnswer)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path.parent / f"{tmp_path.name}-cache"))
    monkeypatch.chdir(tmp_path)


def no_sinfo(monkeypatch):
    from slurmgen.site import limits

    monkeypatch.setattr(limits, "Asking", limits.NoAnswer)


def no_parser(monkeypatch):
    """The training arguments' parser must not be started (plain render, submit)."""
    from slurmgen.site import train_args

    def refuse(*args):
        raise AssertionError("the training arguments' parser was started")

    monkeypatch.setattr(train_args, "ArgsCheck", refuse)


@pytest.mark.machine_vetting
@pytest.mark.parametrize("extra,message", [
    (["--max_stepz", "100"], "unrecognized arguments: --max_stepz 100"),
    (["--lr", "abc"], "argument --lr: invalid float value: 'abc'"),
])
def test_check_fails_for_what_the_entry_points_parser_refuses(extra, message, render_args, cluster_here, tmp_path):
    result = render_args("check", "--nodes", "4", "--gpus", "1,1,2,2", *DDP, *extra)
    assert (result.exit_code, result.stderr) == (1, ""), result.output
    assert result.stdout.splitlines()[-2:] == [
        f"training arguments for train.ddp_loop: {message} (its own parser's verdict)", ARGS_FAIL]


@pytest.mark.machine_vetting
def test_render_check_fails_for_what_the_parser_refuses_and_writes_nothing(render_args, cluster_here, tmp_path):
    result = render_args("render", "--check", "--nodes", "4", "--gpus", "1,1,2,2", *DDP, "--max_stepz", "100")
    assert result.exit_code == 1, result.output
    assert result.stdout.splitlines()[-2:] == [
        "training arguments for train.ddp_loop: unrecognized arguments: --max_stepz 100 (its own parser's verdict)",
        ARGS_FAIL]
    assert os.listdir(tmp_path) == []


@pytest.mark.machine_vetting
def test_check_parses_sft_arguments_with_trls_parser(render_args, cluster_here, tmp_path):
    """The brief's own example on train.sft (TRL's parser: some seconds, for its import)."""
    from conftest import need

    need("trl")
    result = render_args("check", "--nodes", "4", "--gpus", "1,1,2,2", "--", "--model_name_or_path", "m",
                         "--dataset_name", "d", "--learning_rate", "abc")
    assert result.exit_code == 1, result.output
    assert result.stdout.splitlines()[-2:] == [
        "training arguments for train.sft: argument --learning_rate/--learning-rate: invalid float value: 'abc'"
        " (its own parser's verdict)", ARGS_FAIL]


@pytest.mark.machine_vetting
def test_check_passes_accepted_arguments_and_remembers_them(render_args, cluster_here, tmp_path):
    result = render_args("check", "--nodes", "4", "--gpus", "1,1,2,2", *DDP)
    assert result.exit_code == 0, result.output
    assert "result: the layout can run (world size 6)" in result.stdout
    assert "training arguments" not in result.output
    cache = tmp_path.parent / f"{tmp_path.name}-cache"
    kept = sorted(p.name.startswith("options-") for p in (cache / "slurmgen" / "train-args").iterdir())
    assert kept == [False, True]  # the accepted command line, and the parser's option list for render


@pytest.mark.machine_vetting
def test_check_says_the_arguments_were_not_checked_where_the_parser_cannot_run(render_args, cluster_here, tmp_path,
                                                                                monkeypatch):
    """A login node without TRL: one line of the check's output says so, and fails nothing."""
    shadow = tmp_path.parent / f"{tmp_path.name}-shadow"
    for name in ("trl", "transformers"):
        (shadow / name).mkdir(parents=True)
        (shadow / name / "__init__.py").write_text(f"raise ModuleNotFoundError(\"No module named '{name}'\")\n")
    monkeypatch.setenv("PYTHONPATH", str(shadow))
    result = render_args("check", "--nodes", "4", "--gpus", "1,1,2,2", "--", "--model_name_or_path", "m",
                         "--dataset_name", "d")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[-3:-1] == ["training arguments not checked: train.sft's parser cannot run here"
                            " (No module named 'trl'; pip install 'slurmgen[train]')",
                            "result: the layout can run (world size 6)"]
    assert result.stderr == ""


@pytest.mark.machine_vetting
def test_a_sweep_run_is_checked_too(render_args, cluster_here, tmp_path):
    result = render_args("check", "--nodes", "4", "--gpus", "1,1,2,2", "--sweep", "lr=1e-3,abc", *DDP)
    assert result.exit_code == 1, result.output
    assert result.stdout.splitlines()[-2:] == [
        "training arguments for train.ddp_loop: argument --lr: invalid float value: 'abc' (its own parser's verdict)",
        ARGS_FAIL]


@pytest.mark.machine_vetting
def test_plain_render_refuses_what_the_parser_refuses_then_from_its_option_list(render_args, cluster_here, tmp_path,
                                                                               monkeypatch):
    """The first render with these libraries runs the entry point's parser (and says so), which leaves
    its option list; later renders parse against that list without starting it, with its words."""
    result = render_args("render", *DDP, "--max_stepz", "100")
    refused(result, "training arguments for train.ddp_loop: unrecognized arguments: --max_stepz 100"
                    " (its own parser's verdict)", tmp_path)
    no_parser(monkeypatch)
    for extra, message in ((["--lr", "abc"], "argument --lr: invalid float value: 'abc'"),
                           (["--max_steps"], "argument --max_steps: expected one argument"),
                           (["--ddp_find_unused_parameters", "maybe"],
                            "argument --ddp_find_unused_parameters: expected true or false, got 'maybe'"),
                           (["--max_stepz", "100"], "unrecognized arguments: --max_stepz 100")):
        refused(render_args("render", *DDP, *extra),
                f"training arguments for train.ddp_loop: {message} (its own parser's verdict)", tmp_path)
    result = render_args("render", *DDP, "--lr", "3e-4", "--ddp_find_unused_parameters", "true")
    assert (result.exit_code, result.stderr) == (0, ""), result.output
    assert (tmp_path / "generated.sh").exists()


@pytest.mark.machine_vetting
def test_the_first_render_says_it_ran_the_parser_once(render_args, cluster_here, tmp_path, monkeypatch):
    result = render_args("render", *DDP, "--lr", "1e-3")
    assert result.exit_code == 0, result.output
    said = re.fullmatch(r"slurmgen: the training arguments were parsed by train\.ddp_loop's own parser \(its import:"
                        r" \d+ s, once for these libraries; from now on its option list, kept in ~/\.cache/slurmgen,"
                        r" is read\)\n", result.stderr)
    assert said, result.stderr
    no_parser(monkeypatch)
    result = render_args("render", *DDP, "--lr", "2e-3")
    assert (result.exit_code, result.stderr) == (0, ""), result.output


@pytest.mark.machine_vetting
def test_plain_render_parses_sft_arguments_as_trls_parser_does(render_args, cluster_here, tmp_path, monkeypatch):
    """The issue's own examples on train.sft: its option list comes from TRL's parser (the first render
    here imports TRL), and each refusal is that parser's words, as `check` gives them."""
    from conftest import need

    need("trl")
    sft = ["--", "--model_name_or_path", "m", "--dataset_name", "d"]
    refused(render_args("render", *sft, "--max_stepz", "100"), "training arguments for train.sft: Some specified"
            " arguments are not used by the HfArgumentParser: ['--max_stepz', '100'] (its own parser's verdict)",
            tmp_path)
    no_parser(monkeypatch)
    for extra, message in (
            (["--learning_rate", "abc"], "argument --learning_rate/--learning-rate: invalid float value: 'abc'"),
            (["--bf16", "maybe"], "argument --bf16: Truthy value expected: got maybe but expected one of yes/no,"
                                  " true/false, t/f, y/n, 1/0 (case insensitive)."),
            (["--lr_scheduler_type", "cosin"], "argument --lr_scheduler_type/--lr-scheduler-type: invalid choice:"
                                               " 'cosin' (choose from 'linear', 'cosine', 'cosine_with_restarts',"),
            (["--config", "sft.yaml", "--max_steps", "x"], "argument --max_steps/--max-steps: invalid int value: 'x'")):
        result = render_args("render", *sft, *extra)
        assert (result.exit_code, result.stdout) == (2, ""), result.output
        assert result.stderr.startswith(f"slurmgen: error: training arguments for train.sft: {message}"), result.stderr
        assert result.stderr.endswith(" (its own parser's verdict)\n") and result.stderr.count("\n") == 1
        assert os.listdir(tmp_path) == []
    # what the entry point needs beyond its parser (check_args), from the list too; a --config file may name it
    refused(render_args("render", "--", "--model_name_or_path", "m", "--max_steps", "5"),
            "training arguments for train.sft: --dataset_name is required (its own parser's verdict)", tmp_path)
    for extra in ([], ["--bf16", "true"], ["--bf16", "False", "--lr-scheduler-type", "cosine", "--max_steps", "5"],
                  ["--config", "sft.yaml"]):  # TRL reads the file before parsing: it may name what the rest needs
        result = render_args("render", *sft, *extra)
        assert (result.exit_code, result.stderr) == (0, ""), (extra, result.output)
    for args in (["--dataset-name", "d"], ["--config", "sft.yaml"]):
        result = render_args("render", "--", "--model_name_or_path", "m", *args)
        assert (result.exit_code, result.stderr) == (0, ""), (extra, result.output)


@pytest.mark.machine_vetting
def test_plain_render_says_the_arguments_were_not_checked_where_the_parser_cannot_run(render_args, cluster_here,
                                                                                       tmp_path, monkeypatch):
    """A login node without TRL: the script is written, with one line saying the arguments were not
    checked; the next render says it again without trying the parser again."""
    shadow = tmp_path.parent / f"{tmp_path.name}-shadow"
    for name in ("trl", "transformers"):
        (shadow / name).mkdir(parents=True)
        (shadow / name / "__init__.py").write_text(f"raise ModuleNotFoundError(\"No module named '{name}'\")\n")
    monkeypatch.setenv("PYTHONPATH", str(shadow))
    line = ("slurmgen: warning: training arguments not checked: train.sft's parser cannot run here"
            " (No module named 'trl'; pip install 'slurmgen[train]')\n")
    for _ in range(2):
        result = render_args("render", "--", "--model_name_or_path", "m", "--dataset_name", "d", "--max_stepz", "1")
        assert (result.exit_code, result.stderr) == (0, line), result.output
        assert (tmp_path / "generated.sh").exists()
        no_parser(monkeypatch)


@pytest.mark.machine_vetting
@pytest.mark.parametrize("command", ["submit", "submit --detach"])
def test_submit_refuses_what_the_parser_refuses(command, render_args, cluster_here, tmp_path, monkeypatch):
    """Submit queues at once: what its parser refuses never reaches sbatch (a stand-in that would fail)."""
    bin_dir = fake_bin(tmp_path, "sbatch", BROKEN_SBATCH)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    refused(render_args(*command.split(), *DDP, "--max_stepz", "100"), "training arguments for train.ddp_loop:"
            " unrecognized arguments: --max_stepz 100 (its own parser's verdict)", tmp_path)
    result = render_args(*command.split(), *DDP, "--max_steps", "100")
    assert (result.exit_code, result.stderr) == (1, "slurmgen: error: sbatch: fatal: Could not establish a"
                                                    " configuration source\n")


# ------------------------------------------------------------------ a shipped entry point without a model
def no_model(module: str) -> str:
    return (f"no model: {module} would fail on every rank after the queue wait; give one after --, e.g."
            " -- --model_name_or_path Qwen/Qwen2.5-0.5B")


@pytest.mark.parametrize("module", ["train.sft", "train.classify", "train.ddp_loop"])
def test_render_without_a_model_warns_and_writes_the_script(module, render_args, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = render_args("render", "--module", module, "--", "--output_dir", "o")
    assert result.exit_code == 0, result.output
    assert result.stderr == f"slurmgen: warning: {no_model(module)}\n"
    assert (tmp_path / "generated.sh").exists()
    assert "wrote generated.sh" in result.stdout


def test_render_with_a_model_or_a_config_file_does_not_warn(render_args, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for args in (["--", "--model_name_or_path", "m"], ["--", "--model-name-or-path", "m"],
                 ["--", "--config", "sft.yaml"],  # TRL's config file may name the model
                 ["--module", "my.own"], ["--exec", "true"]):
        result = render_args("render", "-o", "job.sh", *args)
        assert (result.exit_code, result.stderr) == (0, ""), (args, result.output)


def test_a_sweep_whose_runs_name_the_model_is_not_warned(render_args, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = render_args("render", "--sweep", "model_name_or_path=m1,m2", "--", "--output_dir", "o")
    assert (result.exit_code, result.stderr) == (0, ""), result.output


@pytest.mark.machine_vetting
@pytest.mark.parametrize("module", ["train.sft", "train.ddp_loop"])
def test_check_without_a_model_fails(module, render_args, cluster_here, tmp_path, monkeypatch):
    no_parser(monkeypatch)  # the finding is made without it
    result = render_args("check", "--nodes", "4", "--gpus", "1,1,2,2", "--module", module, "--", "--output_dir", "o")
    assert (result.exit_code, result.stderr) == (1, ""), result.output
    assert result.stdout.splitlines()[-2:] == [no_model(module), ARGS_FAIL]
    result = render_args("render", "--check", "--nodes", "4", "--gpus", "1,1,2,2", "--module", module)
    assert result.exit_code == 1 and result.stdout.splitlines()[-2:] == [no_model(module), ARGS_FAIL]
    assert os.listdir(tmp_path) == []


def test_submit_without_a_model_is_refused(render_args, tmp_path, monkeypatch):
    bin_dir = fake_bin(tmp_path, "sbatch", BROKEN_SBATCH)  # were it not refused, nothing is queued
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.chdir(tmp_path)
    for args in (["--", "--output_dir", "o"], ["--module", "train.classify", "--detach"]):
        refused(render_args("submit", *args), no_model(args[1] if args[0] == "--module" else "train.sft"), tmp_path)


def test_python_m_slurmgen_submit_without_a_model_is_refused(tmp_path):
    import subprocess

    repo = Path(__file__).resolve().parent.parent
    bin_dir = fake_bin(tmp_path, "sbatch", BROKEN_SBATCH)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
           "PYTHONPATH": os.pathsep.join([str(repo), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "slurmgen.submit", "--", "--output_dir", "o"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert (done.returncode, done.stderr, done.stdout) == (2, f"slurmgen: error: {no_model('train.sft')}\n", "")
    assert os.listdir(tmp_path) == []


def test_relative_container_image_is_made_absolute_and_must_exist(render_args, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = render_args("render", "--container", "apptainer:img.sif")
    refused(result, f"--container 'apptainer:img.sif': no such image '{tmp_path}/img.sif'; give an existing file,"
                    " or an absolute path the nodes see", tmp_path)
    (tmp_path / "img.sif").write_text("")
    result = render_args("render", "-o", "-", "--container", "apptainer:img.sif")
    assert result.exit_code == 0, result.output
    assert f"apptainer exec --nv {tmp_path}/img.sif" in result.stdout or f"{tmp_path}/img.sif" in result.stdout


NEVER_RESUMES = "from transformers import Trainer\ntrainer = Trainer(model=None)\ntrainer.train()\n"


def test_script_that_never_resumes_is_warned_when_requeued(render_args, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text(NEVER_RESUMES)
    result = render_args("render", "--script", "train.py")
    assert result.exit_code == 0, result.output
    assert result.stderr == (f"slurmgen: warning: {tmp_path}/train.py:3: trainer.train() passes no resume_from_checkpoint:"
                             " a requeued run (time limit, preemption, retry) starts again from step 0; render with"
                             " --resume auto, or pass resume_from_checkpoint=True\n")
    for quiet in (["--resume", "auto"], ["--max-restarts", "0", "--max-failures", "0"]):
        assert render_args("render", "--script", "train.py", *quiet).stderr == ""


def test_script_that_is_no_python_is_refused(render_args, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("def broken(:\n")
    result = render_args("render", "-o", "-", "--script", "train.py")
    assert (result.exit_code, result.stderr) == (
        2, f"slurmgen: error: --script '{tmp_path}/train.py': not Python that runs (line 1: invalid syntax)\n")


@pytest.mark.machine_vetting
def test_gpus_above_what_any_node_has_are_refused(render_args, tmp_path, monkeypatch):
    bin_dir = fake_bin(tmp_path, "sinfo", "printf 'node1|gpu*|gpu:4|idle|8|none|1000\\nnode2|gpu*|gpu:a100:8(S:0-1)|idle|8|none|1000\\n'")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.chdir(tmp_path)
    result = render_args("render", "--module", "x.y", "--gpus", "99999")
    refused(result, "--gpus '99999': 99999 GPUs on one node, but no node of this cluster has more than 8 (sinfo)",
            tmp_path)
    assert render_args("render", "-o", "-", "--module", "x.y", "--gpus", "8").exit_code == 0


@pytest.mark.machine_vetting
def test_gpus_above_the_ceiling_where_sinfo_does_not_answer(render_args, tmp_path, monkeypatch):
    bin_dir = fake_bin(tmp_path, "sinfo", "echo 'sinfo: error: unable to contact the controller' >&2; exit 1")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.chdir(tmp_path)
    result = render_args("render", "--module", "x.y", "--gpus", "99999")
    refused(result, "--gpus '99999': 99999 GPUs on one node; slurmgen takes at most 64 (sinfo does not answer here"
                    " to say what the nodes have)", tmp_path)
    assert render_args("render", "-o", "-", "--module", "x.y", "--gpus", "16").exit_code == 0


# ------------------------------------------------------------------ item 6
def test_time_help_names_minutes_and_seconds(render_args):
    help_text = " ".join(render_args("render", "--help").stdout.split())
    assert "MINUTES, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS (25:00 is 25 minutes, not hours)" in help_text


@pytest.mark.parametrize("time,line", [
    ("25:00", "  time limit: 25:00 = 25 min; the ranks checkpoint and the job requeues 180 s before it"),
    ("1-02:03:04", "  time limit: 1-02:03:04 = 1 d 2 h 3 min 4 s; the ranks checkpoint and the job requeues 180 s"
                   " before it"),
    (None, "  time limit: none given (the partition's default); the ranks checkpoint and the job requeues 180 s"
           " before it"),
])
def test_summary_echoes_the_time_limit(time, line, render_args, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = render_args("render", *(["--time", time] if time else []))
    assert line in result.stdout.splitlines()


def test_grace_zero_writes_no_signal_at_zero(render_args, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = render_args("render", "--grace", "0")
    refused(result, "--grace 0: must be at least 15 seconds: the ranks checkpoint for 5 s at least after the"
                    " warning, and the requeue needs 10 s before the time limit", tmp_path)
    assert "#SBATCH --signal=B:USR2@15\n" in render_args("render", "-o", "-", "--grace", "15").stdout


BROKEN_SBATCH = """echo 'sbatch: error: resolve_ctls_from_dns_srv: res_nsearch error: Unknown host' >&2
echo 'sbatch: error: fetch_config: DNS SRV lookup failed' >&2
echo 'sbatch: error: _establish_config_source: failed to fetch config' >&2
echo 'sbatch: fatal: Could not establish a configuration source' >&2
exit 1"""


def test_submit_with_a_broken_slurm_quotes_the_fatal_line_and_leaves_nothing(render_args, tmp_path, monkeypatch):
    bin_dir = fake_bin(tmp_path, "sbatch", BROKEN_SBATCH)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.chdir(tmp_path)
    result = render_args("submit", "--module", "x.y")
    assert (result.exit_code, result.stderr) == (1, "slurmgen: error: sbatch: fatal: Could not establish a"
                                                    " configuration source\n")
    assert os.listdir(tmp_path) == []


def test_submit_refuses_a_setup_line_bash_cannot_parse(render_args, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = render_args("submit", "--module", "x.y", "--setup", "echo 'x")
    refused(result, "--setup \"echo 'x\": not a shell line bash can parse (line 1: unexpected EOF while looking for"
                    " matching `'')", tmp_path)


@pytest.mark.parametrize("log_dir,why", [("/proc/nope", "No such file or directory"),
                                         ("/etc/passwd/x", "Not a directory")])
def test_submit_log_dir_that_cannot_be_made(log_dir, why, render_args, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = render_args("submit", "--module", "x.y", "--log-dir", log_dir)
    refused(result, f"--log-dir '{log_dir}': cannot create it: {why}", tmp_path)


@pytest.mark.parametrize("job_id", ["abc", "12a", "1234_", "١٢"])
def test_watch_refuses_what_is_no_job_id(job_id, render_args):
    result = render_args("watch", job_id)
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == (f"slurmgen: error: JOB_ID {job_id!r}: not a Slurm job id; give its number (1234), an"
                             " array task (1234_7) or a het component (1234+1)\n")


@pytest.mark.parametrize("args,start", [
    (["--nodelist", "n[1-2]", "--nodes", "2", "--exclude", "n[1-" + "9" * 5000 + "]"], "--exclude 'n[1-999"),
    (["--nodelist", "n[1-" + "9" * 5000 + "]"], "--nodelist 'n[1-999"),
])
def test_host_lists_with_digits_int_refuses(args, start, render_args, tmp_path, monkeypatch):
    """Found by test_hostile_options: python-hostlist's int() of 5,000 digits was a ValueError traceback."""
    monkeypatch.chdir(tmp_path)
    result = render_args("render", *args)
    assert (result.exit_code, result.stdout, len(result.stderr.splitlines())) == (2, "", 1)
    assert result.stderr.startswith(f"slurmgen: error: {start}")
    assert os.listdir(tmp_path) == []


@pytest.mark.machine_vetting
def test_a_jobs_render_and_write_refuse_what_the_parser_refuses(cluster_here, tmp_path):
    """slurmgen.Job takes the same steps as render: JobError with render's line, nothing written."""
    import slurmgen

    job = slurmgen.Job(module="train.ddp_loop", args=DDP[3:] + ["--lr", "abc"])
    for step in (job.render, lambda: job.write(tmp_path / "job.sh")):
        with pytest.raises(slurmgen.JobError) as raised:
            step()
        assert str(raised.value) == ("training arguments for train.ddp_loop: argument --lr: invalid float value:"
                                     " 'abc' (its own parser's verdict)")
    assert os.listdir(tmp_path) == []
