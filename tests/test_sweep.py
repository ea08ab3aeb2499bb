"""Sweeps, --after and --prep as rendered (the cluster runs are in tests/e2e/test_sweeps.py)."""
import pytest
from click.testing import CliRunner

from slurmgen.plan import sweep
from slurmgen.cli import cli
from slurmgen.plan.words import SpecError

TRAIN = ("--output_dir", "out", "--learning_rate", "1e-4", "--max_steps", "5")


def test_product_and_zip_name_each_run_and_set_its_arguments():
    runs = sweep.expand(sweep.parse(["learning_rate=1e-3,1e-2", "seed=1,2"]), "product", TRAIN)
    assert [r.name for r in runs] == ["learning_rate-1e-3_seed-1", "learning_rate-1e-3_seed-2",
                                      "learning_rate-1e-2_seed-1", "learning_rate-1e-2_seed-2"]
    assert runs[1].train_args == ("--output_dir", "out/learning_rate-1e-3_seed-2", "--learning_rate", "1e-3",
                                  "--max_steps", "5", "--seed", "2")
    assert runs[1].values_json() == '{"learning_rate": "1e-3", "seed": "2"}'
    zipped = sweep.expand(sweep.parse(["lr=1,2", "seed=3,4"], "zip"), "zip", ("--output_dir=o/",))
    assert [(r.name, r.train_args) for r in zipped] == [
        ("lr-1_seed-3", ("--output_dir=o/lr-1_seed-3", "--lr", "1", "--seed", "3")),
        ("lr-2_seed-4", ("--output_dir=o/lr-2_seed-4", "--lr", "2", "--seed", "4"))]
    odd = sweep.expand(sweep.parse(["model=a/b,a b"]), "product", TRAIN)
    assert [r.name for r in odd] == ["model-a_b", "model-a_b_1"]  # made unique


def test_at_most_n_at_once():
    assert sweep.array_spec(4, 2) == "0-3%2" and sweep.array_spec(3, None) == "0-2" and sweep.array_spec(3, 5) == "0-2"
    assert sweep.waits_for(5, 2) == [None, None, 0, 1, 2]
    assert sweep.dependency((("12", "afterok"), ("13", "afterok"), ("9", "afterany")), "afterany:7") == \
        "afterany:7,afterok:12:13,afterany:9"


@pytest.mark.parametrize("items, mode, message", [
    (["lr"], "product", "--sweep 'lr': expected KEY=V1,V2,... with KEY a training argument name, e.g. learning_rate=1e-4,3e-4"),
    (["lr=1,,2"], "product", "--sweep 'lr=1,,2': every value must be non-empty printable text"),
    (["lr=1", "lr=2"], "product", "--sweep lr: given twice; give all its values in one --sweep"),
    (["lr=1,2", "seed=1"], "zip", "--sweep-mode zip: every --sweep needs as many values (lr: 2, seed: 1)"),
])
def test_bad_sweeps_are_one_line(items, mode, message):
    with pytest.raises(SpecError) as err:
        sweep.parse(items, mode)
    assert str(err.value) == message


def render(tmp_path, *args):
    return CliRunner().invoke(cli, ["render", "--log-dir", str(tmp_path / "logs"), *args], catch_exceptions=False)


def test_a_uniform_sweep_is_one_array_script(tmp_path):
    out = tmp_path / "job.sh"
    result = render(tmp_path, "--nodes", "2", "--gpus", "2", "--sweep", "lr=1,2,3", "--max-parallel", "2",
                    "--after", "41", "--after", "42:any", "-o", str(out), "--", "--output_dir", "o")
    assert result.exit_code == 0, result.output
    text = out.read_text()
    assert "#SBATCH --array=0-2%2\n#SBATCH --dependency=afterok:41,afterany:42\n" in text
    assert "RUN=${SLURM_ARRAY_TASK_ID:?" in text and '"${RUN_ARGS[@]}"' in text
    assert "    2) RUN_DIR=o/lr-3 RUN_VALUES='{\"lr\": \"3\"}'\n        RUN_ARGS=(--output_dir o/lr-3 --lr 3) ;;" in text
    assert not (tmp_path / "job-submit.sh").exists()
    assert "sweep: 3 run(s), at most 2 at once, as one job array (--array=0-2%2)" in result.stdout


def test_an_uneven_sweep_gets_a_submit_script(tmp_path):
    out = tmp_path / "job.sh"
    result = render(tmp_path, "--nodes", "2", "--gpus", "1,2", "--sweep", "lr=1,2,3", "--max-parallel", "1",
                    "-o", str(out), "--", "--output_dir", "o")
    assert result.exit_code == 0, result.output
    assert "--array" not in out.read_text() and "RUN=${SLURMGEN_RUN:?" in out.read_text()
    submit = (tmp_path / "job-submit.sh").read_text()
    assert 'id=$(sbatch --parsable --export=ALL,SLURMGEN_RUN=2 --dependency="afterany:${JOBS[1]}" "$SCRIPT")' in submit
    assert result.stdout.rstrip().endswith(f"submit with: bash {tmp_path / 'job-submit.sh'}")


def test_prep_writes_a_cpu_job_and_training_waits_for_it(tmp_path):
    out = tmp_path / "job.sh"
    result = render(tmp_path, "--prep", "-o", str(out), "--", "--output_dir", "o")
    assert result.exit_code == 0, result.output
    prep = (tmp_path / "job-prep.sh").read_text()
    assert "--gres" not in prep and "export SLURMGEN_PREPARE_ONLY=1\nsrun --ntasks=1 python3 -m train.sft --output_dir o\n" in prep
    assert "export SLURMGEN_PREPARED_DATA=o/prepared-data" in out.read_text()
    assert 'id=$(sbatch --parsable --dependency="afterok:${PREP}" "$SCRIPT")' in (tmp_path / "job-submit.sh").read_text()


@pytest.mark.parametrize("args, message", [
    (["--max-parallel", "2"], "--max-parallel 2: only with --sweep"),
    (["--sweep", "lr=1,2", "--max-parallel", "0", "--", "--output_dir", "o"], "--max-parallel 0: must be a positive integer"),
    (["--sweep", "lr=1,2"], "--sweep: give the training argument --output_dir DIR; each run writes to DIR/NAME, NAME made of its values"),
    (["--prep", "--module", "train.ddp_loop", "--", "--output_dir", "o"],
     "--prep: only --module train.sft prepares its data in a job of its own (SLURMGEN_PREPARE_ONLY)"),
    (["--after", "abc"], "--after 'abc': expected JOB[:ok|any], JOB a Slurm job id (ok: after it succeeded, the default; any: after it ended)"),
    (["--nodes", "2", "--gpus", "1,2", "--sweep", "lr=1,2", "-o", "-", "--", "--output_dir", "o"],
     "-o -: a sweep of heterogeneous jobs or --prep is written to files, with the script that submits them beside it; give -o FILE"),
    (["--sbatch", "array=0-3"], "--sbatch 'array=0-3': slurmgen writes --array itself; use --sweep KEY=V1,V2 and --max-parallel"),
])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, args, message):
    out = tmp_path / "job.sh"
    if "-o" not in args:
        args = ["-o", str(out), *args]
    result = render(tmp_path, *args)
    assert result.exit_code == 2, result.output
    assert result.stderr == f"slurmgen: error: {message}\n"
    assert not out.exists() and not (tmp_path / "job-submit.sh").exists()


def test_submit_path_refuses_prep_for_now():
    from slurmgen.submit import parameters
    from slurmgen.plan.spec import JobSpec
    with pytest.raises(SpecError, match=r"^--prep: not on python -m slurmgen.submit yet; use slurmgen render$"):
        parameters.check_submittable(JobSpec(gpus=(1,), prep=True, train_args=("--output_dir", "o")))


def test_submit_path_passes_the_dependency_to_sbatch():
    """A sweep's chain and --after reach submitit's sbatch parameters as one --dependency."""
    from slurmgen.submit import parameters
    from slurmgen.plan.spec import JobSpec
    params = parameters.slurm_parameters(JobSpec(gpus=(1,), after=(("7", "afterok"),)), None, "afterany:12_0")
    assert params["additional_parameters"]["dependency"] == "afterany:12_0,afterok:7"
    assert "dependency" not in parameters.slurm_parameters(JobSpec(gpus=(1,)))["additional_parameters"]


@pytest.mark.parametrize("option", [["--sweep", "lr=1,2"], ["--after", "12"]])
def test_submit_local_refuses_sweeps_and_dependencies(tmp_path, option):
    from slurmgen.submit import submit_command
    result = CliRunner().invoke(submit_command, ["--local", "--log-dir", str(tmp_path), *option, "--",
                                                 "--model_name_or_path", "m", "--output_dir", str(tmp_path / "o")])
    assert result.exit_code == 2
    assert result.stderr == (f"slurmgen: error: {option[0]}: not with --local, which runs one job on this machine"
                             " without Slurm\n")
    assert not (tmp_path / "o").exists()
