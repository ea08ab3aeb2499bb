"""Generated scripts on a real four-node Slurm cluster (GPUs 1,1,2,2), real srun and torchrun."""
import re
import subprocess
import textwrap
from pathlib import Path

import pytest

from tests.e2e.conftest import REFERENCE_STEPS, REPO, sft_args
from train import cores

UNEVEN = ["--nodes", "4", "--gpus", "1,1,2,2"]
LAYOUT = {"node1": 1, "node2": 1, "node3": 2, "node4": 2}

PROBE = textwrap.dedent('''
    """A user's own DDP script: records rank, host and world size of every rank."""
    import json, os, socket, sys, time
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    if os.environ.get("PROBE_FAIL_RANK") == str(rank):
        sys.exit(7)
    if os.environ.get("PROBE_FAIL_RANK"):
        time.sleep(600)  # the healthy ranks would hang here without fail-fast
    info = {"rank": rank, "world": dist.get_world_size(), "host": socket.gethostname(),
            "local_rank": int(os.environ["LOCAL_RANK"]),
            "local_world": int(os.environ["LOCAL_WORLD_SIZE"]),
            "node_rank": int(os.environ["GROUP_RANK"]), "gloo": os.environ.get("GLOO_SOCKET_IFNAME")}
    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, info)
    if rank == 0:
        with open(sys.argv[1], "w") as out:
            json.dump(everyone, out)
    dist.destroy_process_group()
''')


def assert_layout(metrics, world=6, layout=LAYOUT):
    assert metrics["world_size"] == world
    assert metrics["ranks_per_host"] == layout


@pytest.mark.core
@pytest.mark.timeout(600)
def test_sft_on_uneven_nodes(sft_reference):
    """The seeds' job, submitted from a directory holding the user's own train.py (the seed's file
    name): the default module is still slurmgen's train.sft (conftest's sft_reference)."""
    job = sft_reference
    assert job.state == "COMPLETED", job.log
    assert job.info["ExitCode"] == "0:0"
    metrics = job.metrics()
    assert_layout(metrics)
    assert metrics["last_loss"] < metrics["first_loss"]
    assert metrics["global_step"] == REFERENCE_STEPS
    assert [p.name for p in (job.workdir / "run").glob("checkpoint-*")] == [f"checkpoint-{REFERENCE_STEPS}"]
    assert "master node1:" in job.log
    assert "Traceback" not in job.log and "Error waiting on exit barrier" not in job.log
    assert job.left_on_nodes == []  # each node's last rank took the node's beat folder along
    # Slurm binds each node's torchrun agent to its CPUs; on the 2-GPU nodes each worker takes
    # its own share of them.
    bound = dict(re.findall(r"slurmgen-train: rank (\d) \(local \d of 2\) bound to CPUs (\S+) of \S+", job.log))
    assert sorted(bound) == ["2", "3", "4", "5"], job.log[-3000:]
    for a, b in (("2", "3"), ("4", "5")):
        assert not cores.cpus_in(bound[a]) & cores.cpus_in(bound[b]), bound


@pytest.mark.timeout(600)
def test_classify_on_uniform_two_by_two(submit_job, assets, tmp_path):
    job = submit_job(["--nodes", "2", "--gpus", "2", "--module", "train.classify"], [
        "--model_name_or_path", str(assets / "bert"),
        "--train_file", str(assets / "data" / "labelled_train.jsonl"),
        "--eval_file", str(assets / "data" / "labelled_eval.jsonl"),
        "--output_dir", str(tmp_path / "run"), "--max_steps", "60", "--save_steps", "60",
        "--per_device_train_batch_size", "4", "--learning_rate", "3e-3", "--logging_steps", "5",
        "--report_to", "none"])
    assert job.state == "COMPLETED", job.log
    assert "hetjob" not in (tmp_path / "job.sh").read_text()
    metrics = job.metrics()
    assert_layout(metrics, world=4, layout={"node3": 2, "node4": 2})
    assert metrics["global_step"] == 60 and metrics["last_loss"] < metrics["first_loss"], metrics
    assert metrics["eval_accuracy"] >= 0.8, metrics  # the synthetic reviews' label is in their words
    assert [p.name for p in (tmp_path / "run").glob("checkpoint-*")] == ["checkpoint-60"]


@pytest.mark.core
@pytest.mark.timeout(600)
def test_srun_launcher_on_uneven_nodes(submit_job, assets, tmp_path):
    job = submit_job([*UNEVEN, "--launcher", "srun", "--module", "train.ddp_loop"], [
        "--model_name_or_path", str(assets / "lm"), "--dataset", str(assets / "data" / "text.jsonl"),
        "--output_dir", str(tmp_path / "run"), "--max_steps", "8", "--save_steps", "8",
        "--batch_size", "4", "--lr", "3e-3"])
    assert job.state == "COMPLETED", job.log
    metrics = job.metrics()
    assert_layout(metrics)
    assert metrics["global_step"] == 8 and metrics["last_loss"] < metrics["first_loss"], metrics
    assert [p.name for p in (tmp_path / "run").glob("checkpoint-*")] == ["checkpoint-8"]
    assert job.left_on_nodes == []


@pytest.fixture
def ib_on_node3_and_4(cluster):
    """node3 and node4 name their network interface ib0, node1 and node2 keep eth0: nodes of one
    site that differ, so that an interface prefix list must give each node its own exact name."""
    from tests.e2e.conftest import _layout

    assert _layout()["MODE"] == "netns", "the nodes need network namespaces of their own"

    def rename(old, new):
        for node in ("node3", "node4"):
            for args in (["set", old, "down"], ["set", old, "name", new], ["set", new, "up"]):
                subprocess.run(["ip", "-n", f"sgc-{node}", "link", *args], check=True)

    rename("eth0", "ib0")
    yield
    rename("ib0", "eth0")


@pytest.mark.timeout(300)
@pytest.mark.parametrize("launcher", ["torchrun", "srun"])
def test_users_own_script_sees_every_rank(submit_job, tmp_path, launcher, ib_on_node3_and_4):
    """A plain init_process_group() script: every launcher gives it torchrun's variables. Run
    with --container apptainer:IMAGE through a stand-in apptainer (tests/shims/apptainer: it
    records its command line and runs the command on the host): every step goes through it.
    `--nccl-socket-ifname eth,ib` on nodes whose interfaces are eth0 (node1, node2) and ib0
    (node3, node4): every rank's gloo takes its own node's name, and gloo connects them."""
    import json
    import shutil

    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    (tmp_path / "bin").mkdir()
    shutil.copy(REPO / "tests" / "shims" / "apptainer", tmp_path / "bin")
    record = tmp_path / "apptainer.jsonl"
    job = submit_job([*UNEVEN, "--launcher", launcher, "--script", str(probe),
                      "--container", "apptainer:/images/train.sif", "--setup", f"export PATH={tmp_path / 'bin'}:$PATH",
                      "--env", f"APPTAINER_STANDIN_LOG={record}", "--nccl-socket-ifname", "eth,ib"],
                     [str(tmp_path / "ranks.json")])
    assert job.state == "COMPLETED", job.log
    calls = [json.loads(line) for line in record.read_text().splitlines()]
    assert {(c["image"], c["nv"], c["pwd"]) for c in calls} == {("/images/train.sif", True, str(REPO))}
    assert all(str(tmp_path / "logs") in c["bind"].split(",") for c in calls), calls
    preflight = sorted(c["host"] for c in calls if c["command"][:2] == ["python3", "-c"])
    launched = sorted(c["host"] for c in calls if c["command"][:2] == ["bash", "-c"])
    assert preflight == ["node1", "node2", "node3", "node4"], calls
    assert launched == (["node1", "node2", "node3", "node4"] if launcher == "torchrun"
                        else ["node1", "node2", "node3", "node3", "node4", "node4"]), calls
    ranks = json.loads((tmp_path / "ranks.json").read_text())
    assert [r["rank"] for r in ranks] == [0, 1, 2, 3, 4, 5]
    assert {r["world"] for r in ranks} == {6}
    assert [r["host"] for r in ranks] == ["node1", "node2", "node3", "node3", "node4", "node4"]
    assert [r["local_world"] for r in ranks] == [1, 1, 2, 2, 2, 2]
    assert [r["local_rank"] for r in ranks] == [0, 0, 0, 1, 0, 1]
    assert [r["node_rank"] for r in ranks] == [0, 1, 2, 2, 3, 3]
    assert [r["gloo"] for r in ranks] == ["eth0", "eth0", "ib0", "ib0", "ib0", "ib0"]


# accelerate's own scripts, one after the other in each rank, in one process group: each ends with
# PartialState().destroy_process_group(), which only the last may do.
BOTH_SCRIPTS = """
import runpy, sys
from accelerate import PartialState

scripts, destroy = sys.argv[1:], PartialState.destroy_process_group
for i, script in enumerate(scripts):
    PartialState.destroy_process_group = destroy if i == len(scripts) - 1 else (lambda self, group=None: None)
    runpy.run_path(script, run_name="__main__")
    # One write: the ranks share the log, and unbuffered print writes "passed:" and the name apart.
    sys.stdout.write("passed: " + script.rsplit("/", 1)[1] + "\\n")
    sys.stdout.flush()
"""


@pytest.mark.timeout(300)
@pytest.mark.parametrize("launcher", ["torchrun", "srun"])
def test_accelerates_own_test_scripts_pass_with_the_rank_hooks(submit_job, tmp_path, launcher):
    """accelerate's distributed test scripts (test_ops.py, test_sync.py, from its wheel) as the user's
    code on 1,1,2,2, with the rank hooks on, beside a sitecustomize of the user's own, which still runs
    in every rank."""
    import accelerate

    scripts = Path(accelerate.__file__).parent / "test_utils" / "scripts"
    theirs = tmp_path / "site"
    theirs.mkdir()
    (theirs / "sitecustomize.py").write_text(
        "import os\nif 'RANK' in os.environ:\n"
        f"    open({str(tmp_path / 'theirs')!r} + '-' + os.environ['RANK'], 'w').close()\n")
    both = tmp_path / "both.py"
    both.write_text(BOTH_SCRIPTS)
    job = submit_job([*UNEVEN, "--launcher", launcher, "--script", str(both),
                      "--env", "ACCELERATE_USE_CPU=1", "--env", f"PYTHONPATH={theirs}"],
                     [str(scripts / "test_ops.py"), str(scripts / "test_sync.py")])
    assert job.state == "COMPLETED", job.log[-4000:]
    assert job.log.count("passed: test_ops.py") == 6 and job.log.count("passed: test_sync.py") == 6, job.log[-4000:]
    assert sorted(p.name for p in tmp_path.glob("theirs-*")) == [f"theirs-{r}" for r in range(6)]
    assert "slurmgen rank hooks" not in job.log  # no hook failed


@pytest.mark.core
@pytest.mark.timeout(300)
def test_failing_rank_fails_the_job_promptly(submit_job, tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    import time
    start = time.monotonic()
    job = submit_job([*UNEVEN, "--script", str(probe), "--env", "PROBE_FAIL_RANK=3"],
                     [str(tmp_path / "ranks.json")], timeout=120)
    elapsed = time.monotonic() - start
    assert job.state == "FAILED", job.log
    assert job.info["ExitCode"] != "0:0"
    assert elapsed < 90
    assert "component 1 (2 node(s) x 2 GPUs) failed" in job.log


@pytest.mark.core
@pytest.mark.timeout(300)
def test_options_of_real_training_scripts(submit_job, tmp_path):
    """Issue 11 on the real cluster, one job: a program that is not Python (--exec), rank 0's IP
    address as master, per-GPU memory, CPUs per node, srun and torchrun flags passed through,
    a named log with a separate stderr file, and a pass-through sbatch option."""
    import json
    import re
    import socket

    from tests import slurm_helpers

    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    program = tmp_path / "train-probe"  # as a framework's console script would be
    program.write_text(f'#!/bin/bash\necho "probe program: rank $RANK master $MASTER_ADDR"\n'
                       f'exec python3 {probe} "$@"\n')
    program.chmod(0o755)
    job = submit_job([*UNEVEN, "--exec", str(program), "--master-addr-ip", "--mem-per-gpu", "1500M",
                      "--cpus-per-node", "4", "--srun-arg", "-l", "--launcher-arg=--tee=3",
                      "--error-log", "--log-name", "site-%x-%j.log", "--wait-all-nodes",
                      "--sbatch", "comment=site options run"], [str(tmp_path / "ranks.json")])
    log_path = tmp_path / "logs" / f"site-slurmgen-{job.job_id}.log"
    log = log_path.read_text()
    assert job.state == "COMPLETED", log + (tmp_path / "logs" / f"{log_path.name}.err").read_text()
    ranks = json.loads((tmp_path / "ranks.json").read_text())
    assert [r["host"] for r in ranks] == ["node1", "node2", "node3", "node3", "node4", "node4"]
    node1 = slurm_helpers.node_address("node1")
    socket.inet_aton(node1)
    assert f"master {node1}:" in log
    # srun -l labels each line with its task; torchrun --tee 3 prefixes each worker's lines
    for rank in range(6):
        assert re.search(rf"^\d+: \[default\d\]:probe program: rank {rank} master {re.escape(node1)}$",
                         log, re.M), log
    assert (tmp_path / "logs" / f"{log_path.name}.err").exists()
    components = slurm_helpers.job_info(job.job_id)["components"]
    assert [c["MinMemoryNode"] for c in components] == ["1500M", "3000M"]
    assert [c["NumCPUs"] for c in components] == ["8", "8"]  # 4 per node, two nodes each
    assert components[0]["Comment"] == "site options run"


@pytest.mark.timeout(300)
def test_classify_fsdp_on_uneven_nodes(submit_job, assets, tmp_path):
    """transformers.Trainer with --fsdp on 1,1,2,2: six shares of about a sixth each."""
    job = submit_job([*UNEVEN, "--module", "train.classify"], [
        "--model_name_or_path", str(assets / "bert"),
        "--train_file", str(assets / "data" / "labelled_train.jsonl"),
        "--output_dir", str(tmp_path / "run"), "--max_steps", "6", "--save_steps", "6",
        "--per_device_train_batch_size", "4", "--learning_rate", "1e-3", "--report_to", "none", "--fsdp"])
    assert job.state == "COMPLETED", job.log
    metrics = job.metrics()
    assert_layout(metrics)
    assert metrics["sharding"] == "fsdp"
    shares = metrics["param_bytes_per_rank"]
    assert [share / (sum(shares) / 6) for share in shares] == pytest.approx([1] * 6, rel=0.2), shares


@pytest.mark.timeout(600)
def test_sft_fsdp_on_uneven_nodes(submit_job, assets, tmp_path):
    """FSDP through the Trainer's own arguments on 1,1,2,2: each of the 6 ranks holds about a sixth
    of the parameters, the loss goes down, and the final checkpoint is a normal Hugging Face model."""
    job = submit_job(UNEVEN, [*sft_args(assets, tmp_path, steps=8), "--fsdp"])
    assert job.state == "COMPLETED", job.log
    metrics = job.metrics()
    assert_layout(metrics)
    assert metrics["sharding"] == "fsdp"
    shares = metrics["param_bytes_per_rank"]
    assert [share / (sum(shares) / 6) for share in shares] == pytest.approx([1] * 6, rel=0.2), shares
    assert metrics["last_loss"] < metrics["first_loss"]
    from transformers import AutoModelForCausalLM

    saved = AutoModelForCausalLM.from_pretrained(tmp_path / "run" / "checkpoint-8")
    assert sum(p.numel() * p.element_size() for p in saved.parameters()) == pytest.approx(sum(shares), rel=0.01)
