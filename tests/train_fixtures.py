"""Shared helpers and fixtures for the train/ tests (import them into a test module).

Everything runs offline on CPU: the tiny assets are built once per session, the HF caches
point into a temporary directory, and multi-process runs use torchrun on 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

# Before anything imports huggingface_hub or datasets (they read these at import time).
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# Variables through which a launcher describes a process; none may leak into a test run.
DIST_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR",
             "MASTER_PORT", "TORCHELASTIC_RUN_ID", "SLURMGEN_RANK_OFFSET", "SLURMGEN_WORLD_SIZE",
             "SLURMGEN_STOP_FILE", "SLURMGEN_OUTCOME_FILE", "SLURMGEN_TEST_PARAM_DIGEST_DIR", "CUDA_VISIBLE_DEVICES")

_ASSETS: dict[str, Path] = {}


@pytest.fixture(scope="session")
def tiny(tmp_path_factory) -> Path:
    """The tiny assets (lm/, bert/, data/), built once per session whatever module asks."""
    if "path" not in _ASSETS:
        from train import tiny as tiny_mod

        _ASSETS["path"] = tiny_mod.build(tmp_path_factory.mktemp("tiny"), seed=0)
    return _ASSETS["path"]


@pytest.fixture(scope="session")
def hf_cache(tmp_path_factory) -> Path:
    """A private HF datasets cache, so tests neither read nor pollute the user's."""
    if "cache" not in _ASSETS:
        _ASSETS["cache"] = tmp_path_factory.mktemp("hf-cache")
    return _ASSETS["cache"]


@pytest.fixture
def clean_env(monkeypatch, hf_cache):
    """In-process runs: no launcher or Slurm variables (tests may themselves run under Slurm)."""
    for name in list(os.environ):
        if name in DIST_VARS or name.startswith("SLURM_"):
            monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_DATASETS_CACHE", str(hf_cache / "datasets"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    return monkeypatch


def subprocess_env(hf_cache: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in DIST_VARS and not k.startswith("SLURM_")}
    env.update(
        PYTHONPATH=str(REPO) + os.pathsep + env.get("PYTHONPATH", ""),
        HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", HF_DATASETS_CACHE=str(hf_cache / "datasets"),
        OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", PYTHONUNBUFFERED="1",
    )
    env.update(extra)
    return env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun_cmd(nproc: int, *launch: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc), *launch]


def run_torchrun(module: str, args: list[str], nproc: int, env: dict, timeout: float = 180):
    """One torchrun agent, nproc workers on this machine."""
    cmd = torchrun_cmd(nproc, "--standalone", "-m", module, *args)
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


def run_uneven(module: str, args: list[str], nprocs: list[int], env: dict, timeout: float = 240):
    """One torchrun agent per "node", all on 127.0.0.1, static rendezvous: uneven nodes on one host."""
    port = str(free_port())
    procs = []
    for node_rank, nproc in enumerate(nprocs):
        cmd = torchrun_cmd(nproc, "--nnodes", str(len(nprocs)), "--node-rank", str(node_rank),
                           "--master-addr", "127.0.0.1", "--master-port", port, "-m", module, *args)
        procs.append(subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    return _collect(procs, timeout)


def slurm_port() -> tuple[int, int]:
    """A free port p in [20000, 40000) and a job id to go with it."""
    import random

    for _ in range(200):
        port = random.randrange(20000, 40000)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port, 100000 + (port - 20000)
    raise RuntimeError("no free port in [20000, 40000)")


def run_slurm_tasks(module: str, args: list[str], components: list[list[int]], env: dict,
                    timeout: float = 240):
    """Start processes the way `srun` does with one task per GPU (no torchrun, no MASTER_*).

    ``components``: tasks per node for each srun; one component is a plain job step, several
    are the components of a het job, each started by its own srun (SLURM_PROCID restarts at
    0), with the SLURMGEN_RANK_OFFSET/SLURMGEN_WORLD_SIZE the generated script exports.
    Node "names" are loopback addresses so the master address derived from the node list
    resolves; MASTER_PORT is exported as the batch script does.
    """
    from hostlist import collect_hostlist

    port, leader = slurm_port()
    world = sum(sum(c) for c in components)
    het = len(components) > 1
    lists, next_node = [], 1
    for comp in components:
        lists.append(collect_hostlist([f"127.0.0.{next_node + i}" for i in range(len(comp))]))
        next_node += len(comp)
    procs, offset = [], 0
    for index, comp in enumerate(components):
        ntasks = sum(comp)
        procid = 0
        for node_id, on_node in enumerate(comp):
            for local_id in range(on_node):
                task_env = dict(env)
                task_env.update(
                    SLURM_JOB_ID=str(leader + index), SLURM_STEP_ID="0", SLURM_PROCID=str(procid),
                    SLURM_LOCALID=str(local_id), SLURM_NODEID=str(node_id), SLURM_NTASKS=str(ntasks),
                    SLURM_STEP_NUM_TASKS=str(ntasks),
                    SLURM_STEP_TASKS_PER_NODE=",".join(str(n) for n in comp),
                    SLURM_STEP_NODELIST=lists[index], SLURM_JOB_NODELIST=lists[index],
                    MASTER_PORT=str(port),  # exported by the batch script (slurmgen.plan.spec.job_port)
                )
                if het:
                    task_env.update(
                        SLURM_HET_JOB_ID=str(leader), SLURM_JOB_NODELIST_HET_GROUP_0=lists[0],
                        SLURMGEN_RANK_OFFSET=str(offset), SLURMGEN_WORLD_SIZE=str(world),
                    )
                procs.append(subprocess.Popen([sys.executable, "-m", module, *args], cwd=REPO,
                                              env=task_env, stdout=subprocess.PIPE,
                                              stderr=subprocess.STDOUT, text=True))
                procid += 1
        offset += ntasks
    return _collect(procs, timeout)


def _collect(procs, timeout: float):
    deadline = time.time() + timeout
    results = []
    try:
        for p in procs:
            out, _ = p.communicate(timeout=max(deadline - time.time(), 1))
            results.append((p.returncode, out))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return results


def assert_ok(result) -> None:
    """A subprocess.run result, or a list of (rc, output) from run_uneven/run_slurm_tasks."""
    if isinstance(result, list):
        for rc, out in result:
            assert rc == 0, out[-6000:]
    else:
        assert result.returncode == 0, (result.stdout + result.stderr)[-6000:]


def read_metrics(output_dir: Path) -> dict:
    return json.loads((Path(output_dir) / "metrics.json").read_text())


def progress_lines(output_dir: Path) -> list[dict]:
    path = Path(output_dir) / "progress.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def assert_same_params(digest_dir: Path, world_size: int) -> None:
    """Every rank wrote its final parameter digest, and they are all the same."""
    digests = {p.name: p.read_text().strip() for p in Path(digest_dir).glob("rank*.sha256")}
    assert sorted(digests) == sorted(f"rank{r}.sha256" for r in range(world_size)), digests
    assert len(set(digests.values())) == 1, digests


def checkpoint_dirs(output_dir: Path) -> list[str]:
    return sorted((p.name for p in Path(output_dir).iterdir() if p.name.startswith("checkpoint-")),
                  key=lambda n: int(n.split("-")[1]))


def assert_single_writer(output_dir: Path, steps_logged: int, checkpoints: list[int]) -> None:
    """Rank 0 alone wrote: one progress line per logged step (not one per rank), one metrics
    file, exactly the expected complete checkpoints, and no stray staging directories."""
    from train import checkpoint

    assert len(progress_lines(output_dir)) == steps_logged
    assert checkpoint_dirs(output_dir) == [f"checkpoint-{s}" for s in checkpoints]
    for s in checkpoints:
        assert checkpoint.is_complete(Path(output_dir) / f"checkpoint-{s}")
    stray = [p.name for p in Path(output_dir).iterdir() if p.name.startswith((".staging", ".metrics"))]
    assert not stray, stray


# ---------------------------------------------------------------------------- arguments
# Learning rates are high on purpose: the tiny models must show a falling loss in a few steps.
def sft_args(tiny: Path, out: Path, max_steps: int = 10, save_steps: int = 5, *extra: str,
             data: str = "text.jsonl", batch: int = 4) -> list[str]:
    return ["--model_name_or_path", str(tiny / "lm"), "--dataset_name", str(tiny / "data" / data),
            "--output_dir", str(out), "--max_steps", str(max_steps), "--save_steps", str(save_steps),
            "--per_device_train_batch_size", str(batch), "--logging_steps", "1",
            "--learning_rate", "3e-3", "--report_to", "none", "--disable_tqdm", "true", *extra]


def classify_args(tiny: Path, out: Path, max_steps: int = 60, save_steps: int = 30, *extra: str,
                  batch: int = 16, logging_steps: int = 5) -> list[str]:
    return ["--model_name_or_path", str(tiny / "bert"),
            "--train_file", str(tiny / "data" / "labelled_train.jsonl"),
            "--eval_file", str(tiny / "data" / "labelled_eval.jsonl"),
            "--output_dir", str(out), "--max_steps", str(max_steps), "--save_steps", str(save_steps),
            "--per_device_train_batch_size", str(batch), "--logging_steps", str(logging_steps),
            "--learning_rate", "3e-3", "--report_to", "none", "--disable_tqdm", "true", *extra]


def ddp_args(tiny: Path, out: Path, max_steps: int = 10, save_steps: int = 5, *extra: str,
             batch: int = 8) -> list[str]:
    return ["--model_name_or_path", str(tiny / "lm"), "--dataset", str(tiny / "data" / "text.jsonl"),
            "--output_dir", str(out), "--max_steps", str(max_steps), "--save_steps", str(save_steps),
            "--batch_size", str(batch), "--lr", "3e-3", *extra]


ARGS = {"train.sft": sft_args, "train.classify": classify_args, "train.ddp_loop": ddp_args}


def entry(module: str):
    """The in-process main() of an entry point."""
    import importlib

    return importlib.import_module(module).main
