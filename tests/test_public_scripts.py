"""The jobs that public training repositories ship, expressed with slurmgen (issue 11).

tests/public_scripts/ holds the #SBATCH, srun and launcher lines of each script as its repository
has it (the first line says where from). For every one, a slurmgen command renders a script
that asks Slurm for the same resources per node (nodes, tasks, CPUs, GPUs, memory, placement,
partition, time, ...) and passes the same srun and launcher flags.
"""
import re
import shlex
from pathlib import Path

import pytest

from slurmgen.plan.words import parse_time

SCRIPTS = Path(__file__).parent / "public_scripts"
SHORT = {"N": "nodes", "n": "ntasks", "c": "cpus-per-task", "p": "partition", "A": "account",
         "t": "time", "J": "job-name", "o": "output", "e": "error", "D": "chdir", "C": "constraint",
         "q": "qos", "w": "nodelist", "x": "exclude", "G": "gpus"}
ALIASES = {"err": "error"}
FLAGS = {"exclusive", "overcommit", "requeue", "no-requeue", "hold", "contiguous"}
# What must agree besides the per-node resources; names, logs and the working directory need not.
PLACEMENT = ("exclusive", "mem", "mem-per-cpu", "partition", "account", "qos", "constraint",
             "reservation", "hint", "threads-per-core", "mail-type", "wait-all-nodes", "overcommit")

# name: (slurmgen arguments, srun flags, launcher flags), the flags as the public script writes
# them; `--script` files are created in a temporary directory.
CASES = {
    "torchtitan_multinode_trainer": (
        ["--job-name", "torchtitan_multi_node", "--nodes", "4", "--gpus", "8", "--cpus-per-node", "96",
         "--partition", "train", "--master-addr-ip", "--module", "torchtitan.train"], [], []),
    "accelerate_submit_multinode": (
        ["--job-name", "multinode", "--nodes", "4", "--gpus", "4", "--launcher", "accelerate",
         "--cpus-per-node", "160", "--time", "01:59:00", "--log-name", "O-%x.%j", "--error-log",
         "--script", "complete_nlp_example.py"], [], []),
    "accelerate_submit_multinode_fsdp": (
        ["--nodes", "4", "--gpus", "4", "--launcher", "accelerate", "--cpus-per-node", "160",
         "--time", "01:59:00", "--error-log", "--launcher-arg=--config_file=fsdp_config.yaml",
         "--script", "complete_nlp_example.py"], [], ["--config_file"]),
    "alignment_handbook_launch": (
        ["--nodes", "2", "--gpus", "8", "--launcher", "accelerate", "--exclusive", "--partition",
         "hopper-prod", "--time", "3-00:00:00", "--error-log", "--srun-arg=--wait=60",
         "--launcher-arg=--config_file=recipes/accelerate_configs/zero3.yaml",
         "--launcher-arg=--max_restarts=1", "--launcher-arg=--tee=3", "--script", "sft.py"],
        ["--wait=60", "--kill-on-bad-exit=1"], ["--config_file", "--max_restarts 1", "--tee 3"]),
    "nanotron_train_2": (
        ["--nodes", "2", "--gpus", "8", "--cpus-per-node", "60", "--exclusive", "--account", "ycm@a100",
         "--constraint", "a100", "--reservation", "bloom2", "--launcher-arg=--max_restarts=0",
         "--launcher-arg=--tee=3", "--script", "run_train.py"], [], ["--max_restarts 0", "--tee 3"]),
    "mlengineering_torchrun_launcher": (
        ["--nodes", "2", "--gpus", "8", "--cpus-per-node", "96", "--time", "0:10:00", "--exclusive",
         "--partition", "xyz-cluster", "--srun-arg=--wait=60", "--launcher-arg=--max_restarts=0",
         "--launcher-arg", "--tee", "--launcher-arg", "3", "--script", "torch-distributed-gpu-test.py"],
        ["--wait=60", "--kill-on-bad-exit=1"], ["--max_restarts 0", "--tee 3"]),
    "mlengineering_srun_launcher": (
        ["--nodes", "2", "--gpus", "8", "--launcher", "srun", "--cpus-per-gpu", "10", "--time", "0:10:00",
         "--exclusive", "--partition", "xyz-cluster", "--srun-arg=--wait=60",
         "--script", "torch-distributed-gpu-test.py"], ["--wait=60", "--kill-on-bad-exit=1"], []),
    "bigscience_tr11_176B_ml": (
        ["--nodes", "24", "--gpus", "8", "--partition", "gpu_p5", "--constraint", "a100",
         "--reservation", "hug", "--qos", "qos_gpu-gc", "--cpus-per-node", "64", "--hint", "nomultithread",
         "--time", "100:00:00", "--account", "six@a100", "--srun-arg=--wait=60",
         "--launcher-arg=--max_restarts=0", "--launcher-arg=--tee=3", "--script", "pretrain_gpt.py"],
        ["--wait=60", "--kill-on-bad-exit=1"], ["--max_restarts 0", "--tee 3"]),
    "awsome_megatron_gpt3": (
        ["--nodes", "2", "--gpus", "8", "--exclusive", "--wait-all-nodes", "--srun-arg", "-l",
         "--container-image", "megatron.sqsh", "--container-mounts", "/fsx:/fsx",
         "--script", "pretrain_gpt.py"], ["-l"], []),
    "awsome_fsdp_llama3_1_8b": (
        ["--nodes", "4", "--gpus", "8", "--exclusive", "--error-log", "--srun-arg", "-l",
         "--script", "train.py"], ["-l"], []),
    "openrlhf_train_nonrl_slurm": (
        ["--nodes", "1", "--gpus", "8", "--time", "0-00:30:00", "--exclusive", "--mem", "0",
         "--mail-type", "FAIL", "--sbatch", "overcommit", "--module", "openrlhf.cli.train_sft"], [], []),
    "megatron_sc21_srun": (
        ["--nodes", "2", "--gpus", "8", "--launcher", "srun", "--time", "0:30:00", "--exclusive",
         "--mem", "0", "--sbatch", "overcommit", "--srun-arg", "-l", "--exec", "sh", "--",
         "-c", "python -u pretrain_gpt.py"], ["-l"], []),
    "pytorch_examples_ddp_sbatch_run": (
        ["--job-name", "multinode-example", "--nodes", "4", "--gpus", "1", "--cpus-per-gpu", "4",
         "--master-addr-ip", "--script", "multinode_torchrun.py", "--", "50", "10"], [], []),
}


def sbatch_components(text: str) -> list[dict]:
    """#SBATCH options per het component, long names; lines with template placeholders skipped."""
    components = [{}]
    for line in text.splitlines():
        if not line.startswith("#SBATCH") or "{" in line:
            continue
        words = shlex.split(line[len("#SBATCH"):].split(" #", 1)[0])
        i = 0
        while i < len(words):
            word = words[i]
            if word == "hetjob":
                components.append({})
            elif word.startswith("--"):
                name, eq, value = word[2:].partition("=")
                if not eq and name not in FLAGS and i + 1 < len(words):
                    i, value = i + 1, words[i + 1]
                components[-1][ALIASES.get(name, name)] = value
            elif word.startswith("-"):
                value = word[2:]
                if not value:
                    i, value = i + 1, words[i + 1]
                components[-1][SHORT[word[1]]] = value
            i += 1
    return components


def per_node(options: dict) -> dict:
    """What one node of a component is asked for, however the script spells it."""
    nodes = int(options.get("nodes", 1))
    tasks = int(options["ntasks-per-node"]) if "ntasks-per-node" in options else \
        int(options.get("ntasks", nodes)) // nodes
    out = {"tasks per node": tasks}
    if "nodes" in options:  # else given to sbatch on the command line
        out["nodes"] = nodes
    if "cpus-per-task" in options:
        out["CPUs per node"] = tasks * int(options["cpus-per-task"])
    gres = re.search(r"gpu:(\d+)", options.get("gres", ""))
    if gres:
        out["GPUs per node"] = int(gres.group(1))
    elif "gpus-per-node" in options:
        out["GPUs per node"] = int(options["gpus-per-node"])
    elif "gpus-per-task" in options:
        out["GPUs per node"] = tasks * int(options["gpus-per-task"])
    if "time" in options:
        out["time"] = parse_time(options["time"])
    out.update({k: options[k] for k in PLACEMENT if k in options})
    out["separate stderr"] = "error" in options
    return out


def tokens(text: str) -> list[str]:
    """Words of shell lines, quoted commands split too, options as --name value with - for _."""
    out = []
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        try:
            words = shlex.split(line)
        except ValueError:
            words = line.split()
        for word in (w for part in words for w in part.split()):
            name, eq, value = word.partition("=")
            if word.startswith("--"):
                out.append(name.replace("_", "-"))
                if eq:
                    out.append(value)
            else:
                out.append(word)
    return out


def contains(haystack: list[str], flag: str) -> bool:
    needle = tokens(flag)
    return any(haystack[i:i + len(needle)] == needle for i in range(len(haystack)))


def training_steps(script: str) -> str:
    """The training sruns of a rendered script (each launch function's, from srun to its target),
    with the container words the launch lines take from CONTAINER_SRUN and CONTAINER_EXEC."""
    for name in ("CONTAINER_SRUN", "CONTAINER_EXEC"):
        words = next((l.split("=(", 1)[1].rsplit(")", 1)[0] for l in script.splitlines() if l.startswith(f"{name}=(")), "")
        script = script.replace(f'"${{{name}[@]}}"', words)
    lines, keep = [], False
    for line in script.splitlines():
        keep = keep or line.lstrip().startswith("exec srun ")
        if keep:
            lines.append(line.rstrip("\\"))
        if '"${TARGET[@]}"' in line:
            keep = False
            lines.append("")
    return " ".join(lines)


@pytest.mark.parametrize("name", sorted(CASES))
def test_public_script_as_slurmgen_command(name, render_args, tmp_path, monkeypatch):
    args, srun_flags, launcher_flags = CASES[name]
    public = (SCRIPTS / f"{name}.sh").read_text()
    assert public.startswith("# source: https://github.com/")
    monkeypatch.chdir(tmp_path)
    if "--script" in args:
        (tmp_path / args[args.index("--script") + 1]).write_text("print('train')\n")
    result = render_args("render", "-o", "job.sh", "--log-dir", "logs", *args)
    assert result.exit_code == 0, result.output
    ours = (tmp_path / "job.sh").read_text()

    theirs_job = per_node(sbatch_components(public)[0])
    ours_job = per_node(sbatch_components(ours)[0])
    assert {k: ours_job.get(k) for k in theirs_job} == theirs_job
    steps = tokens(training_steps(ours))
    for flag in srun_flags + launcher_flags:
        assert contains(tokens(public), flag), f"{flag} not in {name}"
        assert contains(steps, flag), f"{flag} not in the rendered training steps"
    if "--container-image" in args:
        assert contains(steps, "--container-image") and contains(tokens(public), "--container-image")


def test_every_case_has_a_fixture_and_eight_or_more_are_compared():
    assert sorted(p.stem for p in SCRIPTS.glob("*.sh")) == sorted(CASES)
    assert len(CASES) >= 8
