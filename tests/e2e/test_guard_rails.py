"""Guard rails on the real cluster: `slurmgen check` against sinfo, preflight stopping a job whose
nodes differ, and an unruly job name reaching Slurm intact."""
import subprocess
import sys
import textwrap

import pytest

from tests import slurm_helpers
from tests.e2e.conftest import BIN, REPO

SLURMGEN = str(BIN / "slurmgen")


def check(*args):
    return subprocess.run([SLURMGEN, "check", *args], capture_output=True, text=True, timeout=60)


# train.sft's training arguments, which its own parser accepts (check fails without a model)
SFT_ARGS = ["--", "--model_name_or_path", "m", "--dataset_name", "d"]


@pytest.mark.core
def test_check_accepts_layouts_that_fit(cluster):
    for layout in (["--nodes", "4", "--gpus", "1,1,2,2"], ["--nodes", "4", "--gpus", "1"]):
        result = check(*layout, *SFT_ARGS)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "result: the layout can run" in result.stdout
        # Slurm's own estimate (sbatch --test-only), for a het job and a plain one alike
        assert "\nstart (sbatch --test-only): starts now on node[1-4]\n" in result.stdout, result.stdout
    assert "component 1 (2 node(s) x 2 GPU(s)): can run on node3, node4" in check(
        "--nodes", "4", "--gpus", "1,1,2,2", *SFT_ARGS).stdout


# Before the test that drains a node: after its resume, node2 can read "idle*" (not responding)
# for a moment, and the layout would not be one that can run.
def test_check_names_the_lines_of_the_seeds_script_that_would_fail_every_rank(cluster):
    """The layout can run, but seed 000's train.py (as written) fails on every rank after the
    queue wait: check says so, line by line, and exits 1; nothing is asked of sbatch."""
    seed = REPO / "tests" / "data" / "seed000" / "train.py"
    result = check("--nodes", "4", "--gpus", "1,1,2,2", "--script", str(seed))
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"script {seed}: 4 line(s) would fail on every rank:\n  {seed}:12: from_pretrained(device_map='auto')" \
        in result.stdout
    for line in (20, 22, 23):
        assert f"\n  {seed}:{line}: SFTTrainer(" in result.stdout
    assert result.stdout.rstrip().endswith(
        "result: the layout can run, but the script would fail on every rank after the queue wait")
    assert "sbatch --test-only" not in result.stdout


def test_check_refuses_training_arguments_whose_model_does_not_fit(cluster, tmp_path):
    """With --gpu-mem, check runs fit's arithmetic for the strategy the arguments choose, on GPU memory and
    on the host memory the cluster's nodes have (sinfo's RealMemory: 31.25 GiB here): a 7B Llama under
    DDP + LoRA on 24 GB GPUs is refused (every rank of a node reads the whole model) with the nearest
    strategy that fits; FSDP + LoRA, loaded by one reader per node, passes."""
    import json

    config = json.loads((REPO / "tests" / "data" / "llama-2-70b" / "config.json").read_text())
    config.update(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32, num_attention_heads=32,
                  num_key_value_heads=32)  # Llama-2-7b's shape
    (tmp_path / "config.json").write_text(json.dumps(config))
    model = ["--model_name_or_path", str(tmp_path), "--dataset_name", "d", "--max_length", "512", "--dtype", "bfloat16",
             "--use_peft"]  # a data set too: check parses them with train.sft's own parser
    result = check("--nodes", "4", "--gpus", "1,1,2,2", "--gpu-mem", "24G", "--", *model)
    assert result.returncode == 1, result.stdout + result.stderr
    assert (f"cannot run: {tmp_path} with DDP + LoRA does not fit (35 GiB of host memory on a node > 31.25); the"
            " nearest that fits: FSDP + LoRA, with the training arguments --use_peft --lora_r 16 --fsdp --fsdp_config"
            """ '{"cpu_ram_efficient_loading": true}'""") in result.stdout, result.stdout
    assert result.stdout.rstrip().endswith(
        "result: the layout can run, but the model does not fit it with these training arguments")
    fitting = check("--nodes", "4", "--gpus", "1,1,2,2", "--gpu-mem", "24G", "--", *model, "--fsdp",
                    "--fsdp_config", '{"cpu_ram_efficient_loading": true}')
    assert fitting.returncode == 0, fitting.stdout + fitting.stderr
    assert f"fit: {tmp_path} with FSDP + LoRA: fits (6.2 GiB per GPU of 23.88)" in fitting.stdout


def test_check_refuses_four_nodes_with_two_gpus(cluster):
    result = check("--nodes", "4", "--gpus", "2")
    assert result.returncode == 1
    assert ("component 0 (4 node(s) x 2 GPU(s)): cannot run: needs 4 node(s) with >= 2 GPU(s)"
            " in partition debug; 2 usable (node3, node4)") in result.stdout


def test_check_refuses_missing_partition(cluster):
    result = check("--nodes", "1", "--partition", "a100")
    assert result.returncode == 1
    assert "cannot run: partition 'a100' does not exist; partitions here: debug" in result.stdout


def test_check_reports_a_drained_node(cluster):
    slurm_helpers.drain("node2")
    try:
        result = check("--nodes", "4", "--gpus", "1,1,2,2")
    finally:
        subprocess.run(["scontrol", "update", "nodename=node2", "state=resume"], check=True)
    assert result.returncode == 1
    assert "node2 is drained (slurmgen-test)" in result.stdout
    assert "suggestion: --nodes 3 --gpus 2,2,1 fits the usable nodes here" in result.stdout


def test_check_bad_input_is_exit_2(cluster):
    result = check("--nodes", "2", "--gpus", "1,2,3")
    assert result.returncode == 2
    assert result.stderr.startswith("slurmgen: error: --gpus '1,2,3': 3 counts given for --nodes 2")


@pytest.mark.timeout(300)
def test_preflight_stops_a_job_whose_node_differs(submit_job, tmp_path):
    # node3 sees another trl, as if its environment had drifted: a dist-info shadowing the real one.
    fake = tmp_path / "fake-site"
    (fake / "trl-0.0.1.dist-info").mkdir(parents=True)
    (fake / "trl-0.0.1.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: trl\nVersion: 0.0.1\n")
    wrapper = tmp_path / "python-on-node"
    wrapper.write_text(textwrap.dedent(f"""\
        #!/bin/bash
        if [ "$(hostname)" = node3 ]; then export PYTHONPATH={fake}; fi
        exec {sys.executable} "$@"
        """))
    wrapper.chmod(0o755)
    job = submit_job(["--nodes", "4", "--gpus", "1,1,2,2", "--python", str(wrapper), "--module", "train.ddp_loop"],
                     ["--output_dir", str(tmp_path / "run")], timeout=180)
    assert job.state == "FAILED", job.log
    assert "slurmgen: preflight failed; not starting training:" in job.log
    table = job.log.split("not starting training:")[1]
    assert [line.split() for line in table.strip().splitlines()[:2]] == [
        ["node", "what", "found", "expected"], ["node3", "trl", "0.0.1", "1.16.0"]]
    assert "slurmgen-train" not in job.log and not (tmp_path / "run").exists()


@pytest.fixture
def typed_gpus(cluster):
    """The cluster's GPUs typed: node1 and node2 volta, node3 and node4 ampere (gpu:volta:1 ...)."""
    from tests.e2e.conftest import _layout, _up
    from tests.e2e.test_hangs import wait_idle

    wait_idle()
    before = _layout()
    _up(before["GPUS"].replace(" ", ","), before, before.get("HOST_NAMES", "same"), "volta,volta,ampere,ampere")
    yield
    _up(before["GPUS"].replace(" ", ","), before, before.get("HOST_NAMES", "same"))


def test_gpus_with_and_without_bf16_make_one_fp16_job_and_refuse_an_explicit_bf16(typed_gpus, submit_job,
                                                                                   assets, tmp_path):
    """Typed GRES asked per component (--gpu-type volta,volta,ampere,ampere) and a stand-in for
    nvidia-smi on every node (the volta nodes report V100s, no bf16; the others A100s): preflight
    names the mix and chooses fp16 for every rank, so the explicit --bf16 is refused on the ranks
    before training, in one line."""
    from tests.e2e.conftest import sft_args

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text(textwrap.dedent("""\
        #!/bin/bash
        case $SLURMD_NODENAME in
            node1|node2) echo "Tesla V100-SXM2-32GB, 32768, 7.0" ;;
            *) echo "NVIDIA A100-SXM4-80GB, 81920, 8.0" ;;
        esac
        """))
    (bin_dir / "nvidia-smi").chmod(0o755)
    job = submit_job(["--nodes", "4", "--gpus", "1,1,2,2", "--gpu-type", "volta,volta,ampere,ampere",
                      "--setup", f"export PATH={bin_dir}:$PATH"],
                     [*sft_args(assets, tmp_path, steps=2), "--bf16", "True"], timeout=240)
    assert job.state == "FAILED", job.log
    # Slurm 22.05 writes gres:gpu:TYPE:N, 25.11 gres/gpu:TYPE:N
    assert [(c["TresPerNode"].replace("gres/", "gres:"), c["NodeList"]) for c in job.info["components"]] == [
        ("gres:gpu:volta:1", "node[1-2]"), ("gres:gpu:ampere:2", "node[3-4]")], job.info
    assert ("slurmgen: the job's GPUs differ in bf16 support (node1: Tesla V100-SXM2-32GB (no bf16); node2: Tesla"
            " V100-SXM2-32GB (no bf16); node3: NVIDIA A100-SXM4-80GB (bf16); node4: NVIDIA A100-SXM4-80GB (bf16)):"
            " every rank trains in fp16") in job.log, job.log[-4000:]
    assert ("error: --bf16: some of the job's GPUs have no bf16 (the preflight line in the job log names them);"
            " drop it: every rank trains in fp16") in job.log, job.log[-4000:]
    assert not (tmp_path / "run" / "progress.jsonl").exists()


def test_unruly_job_name_reaches_slurm_intact(cluster, tmp_path):
    name = """it's "quoted" $HOME `id` \\ # not a comment"""
    script = tmp_path / "job.sh"
    subprocess.run([SLURMGEN, "render", "-o", str(script), "--log-dir", str(tmp_path / "logs dir"),
                    "--job-name", name], check=True, capture_output=True)
    job = slurm_helpers.submit(script, "--hold", cwd=tmp_path)
    try:
        info = slurm_helpers.job_info(job)
    finally:
        slurm_helpers.cancel(job)
    assert info["JobName"] == name
    assert info["StdOut"] == f"{tmp_path}/logs dir/{name}-{job}.out"
