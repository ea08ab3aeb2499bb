"""End-to-end fixtures: a real Slurm cluster (tests/localcluster.sh), the tiny offline assets,
and a helper that renders with the real `slurmgen` command, submits with sbatch and waits."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests import slurm_helpers

REPO = Path(__file__).resolve().parents[2]
CLUSTER = REPO / "tests" / "localcluster.sh"
STATE = Path(os.environ.get("SLURMGEN_CLUSTER_DIR", "/tmp/slurmgen-cluster"))
BIN = Path(sys.executable).parent
# The network check (on by default for every multi-node job) imports torch on every node, about 8 s
# of this machine's two cores per job: it runs where a test asks for it (--net-check, which wins
# as the later flag): the reference SFT job, the spares and the slow nodes' jobs; bench/net_check.py
# measures it over healthy runs.
NET_CHECK_OFF = ["--no-net-check"]
OFFLINE = ["--env", "HF_HUB_OFFLINE=1", "--env", "HF_DATASETS_OFFLINE=1",
           "--env", "TOKENIZERS_PARALLELISM=false"]


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/e2e/" in str(item.fspath):
            item.add_marker(pytest.mark.cluster)


@pytest.fixture(scope="session")
def cluster():
    ok, reason = slurm_helpers.cluster_available()
    if not ok:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true but the Slurm cluster is not available: {reason}")
        pytest.skip(f"no Slurm cluster: {reason}")
    return True


@pytest.fixture(scope="session")
def assets(tmp_path_factory):
    out = tmp_path_factory.mktemp("assets")
    subprocess.run([sys.executable, "-m", "train.tiny", str(out)], check=True, cwd=REPO,
                   env=dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1"))
    return out


class JobRun:
    def __init__(self, job_id, info, workdir):
        self.job_id = job_id
        self.info = info
        self.workdir = workdir

    @property
    def state(self):
        return self.info["State"]

    @property
    def log(self):
        return "".join(p.read_text(errors="replace") for p in sorted((self.workdir / "logs").glob("*.out")))

    def metrics(self, run="run"):
        return json.loads((self.workdir / run / "metrics.json").read_text())

    @property
    def left_on_nodes(self) -> list[str]:
        """The job's node beat folders still in the nodes' /tmp (one /tmp for all nodes here). Job
        ids start again with each new cluster: a folder older than the job is another job's."""
        started = slurm_helpers.slurm_time(self.info["StartTime"]) - 1  # StartTime counts whole seconds
        return sorted(str(p) for p in Path("/tmp").glob(f"slurmgen-beats-{self.job_id}-*")
                      if p.stat().st_mtime >= started)


def render_and_submit(workdir: Path, args, train_args=(), timeout=420, wait=True, submit_dir=REPO, env=None,
                      hold=False):
    """`slurmgen render ARGS -- TRAIN_ARGS`, `sbatch --parsable` in submit_dir (where the job
    starts; from a shell with env, where given; held, with hold), poll until the job ends."""
    script = workdir / "job.sh"
    # One CPU per GPU: the local cluster's nodes share this machine's two cores, and with two
    # OpenMP threads per rank (the script's OMP_NUM_THREADS, from --cpus-per-gpu) six ranks spun
    # on them for 1.6 s a step, where one thread each takes 0.1 s.
    cmd = [str(BIN / "slurmgen"), "render", "-o", str(script), "--log-dir", str(workdir / "logs"),
           "--cpus-per-gpu", "1", "--setup", f"source {BIN / 'activate'}", *OFFLINE, *NET_CHECK_OFF, *args,
           "--", *train_args]
    rendered = subprocess.run(cmd, cwd=workdir, capture_output=True, text=True)
    assert rendered.returncode == 0, f"render exited {rendered.returncode}: {rendered.stderr}{rendered.stdout}"
    job_id = slurm_helpers.submit(script, *(["--hold"] if hold else []), cwd=submit_dir, env=env)
    if not wait:
        return job_id
    info = slurm_helpers.wait_job(job_id, timeout)
    return JobRun(job_id, info, workdir)


@pytest.fixture
def submit_job(cluster, tmp_path):
    def run(args, train_args=(), **kwargs):
        return render_and_submit(tmp_path, args, train_args, **kwargs)
    return run


# The 1,1,2,2 SFT run that tests/e2e/test_jobs.py checks, and the reference for exact resume: jobs
# with these arguments that were stopped, crashed and resumed log its loss at every step (a
# constant learning rate, so that a shorter run of them is a prefix of this one).
REFERENCE_STEPS = 30
# With DDP's first bucket layout kept (--ddp_find_unused_parameters true): six ranks resume bit for
# bit (DDP otherwise lays its buckets out again after a run's first step, and the first step after a
# resume sums more than two ranks' gradients in another order; the job log says so).
REFERENCE_ARGS = {"per_device_train_batch_size": 1, "lr_scheduler_type": "constant", "ddp_find_unused_parameters": "true"}


@pytest.fixture(scope="session")
def sft_reference(cluster, assets, tmp_path_factory):
    """The uninterrupted run, submitted once per session from a directory holding the user's own
    train.py (the seed's file name), which must not shadow train.sft."""
    workdir = tmp_path_factory.mktemp("sft-reference")
    work = workdir / "work"
    work.mkdir()
    (work / "train.py").write_text('raise SystemExit("the user\'s train.py ran instead of train.sft")\n')
    return render_and_submit(workdir, ["--nodes", "4", "--gpus", "1,1,2,2", "--net-check"],
                             sft_args(assets, workdir, steps=REFERENCE_STEPS, **REFERENCE_ARGS), submit_dir=work)


def logged_losses(run_dir: Path) -> list[tuple[int, float]]:
    """Every (step, loss) rank 0 logged, in order: steps run again after a crash appear twice."""
    lines = (run_dir / "progress.jsonl").read_text().splitlines()
    return [(row["step"], row["loss"]) for row in map(json.loads, lines) if "loss" in row]


def assert_exact_resume(reference: JobRun, run_dir: Path, log: str) -> None:
    """Every loss the interrupted runs logged is the reference's at that step, bit for bit, and every
    resume said in the job log that it is exact."""
    ref = dict(logged_losses(reference.workdir / "run"))
    assert sorted(ref) == list(range(1, REFERENCE_STEPS + 1)), ref
    got = logged_losses(run_dir)
    assert got and all(step in ref for step, _ in got), got
    differ = {step: (loss, ref[step]) for step, loss in got if loss != ref[step]}
    assert not differ, f"losses that differ from the uninterrupted run's (step: got, reference): {differ}"
    print(f"resumed run: all {len(got)} logged losses bit for bit the uninterrupted run's")
    resumes = re.findall(r"resume from step (\d+) is (exact|not exact[^\n]*)", log)
    assert resumes and all(verdict == "exact" for _, verdict in resumes), resumes


def assert_same_weights(reference: JobRun, run_dir: Path, step: int) -> None:
    """The checkpoints of the same step hold the same weights, bit for bit."""
    from safetensors.torch import load_file

    ref = load_file(str(reference.workdir / "run" / f"checkpoint-{step}" / "model.safetensors"))
    got = load_file(str(run_dir / f"checkpoint-{step}" / "model.safetensors"))
    assert sorted(ref) == sorted(got)
    drift = max((ref[name] - got[name]).abs().max().item() for name in ref)
    print(f"resumed run: weights at step {step} within {drift:.2g} of the uninterrupted run's")
    assert drift == 0, drift


def sft_args(assets, workdir, steps=12, **extra):
    args = ["--model_name_or_path", str(assets / "lm"), "--dataset_name", str(assets / "data" / "text.jsonl"),
            "--output_dir", str(workdir / "run"), "--max_steps", str(steps), "--save_steps", str(steps),
            "--per_device_train_batch_size", "4", "--learning_rate", "3e-3", "--logging_steps", "1",
            "--report_to", "none"]
    for key, value in extra.items():
        args += [f"--{key}", str(value)]
    return args


# ---- the cluster's layout, changed for a module and put back after it
def _layout() -> dict[str, str]:
    text = (STATE / "layout").read_text()
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def _up(gpus: str, layout: dict[str, str], host_names: str, gpu_types: str = "") -> None:
    subprocess.run(["bash", str(CLUSTER), "down"], check=True, capture_output=True, text=True)
    proc = subprocess.run(["bash", str(CLUSTER), "up", "--gpus", gpus, "--profile", layout.get("PROFILE", "auto"),
                           "--slurm", layout.get("SLURM", "system") or "system", "--host-names", host_names,
                           *(["--gpu-types", gpu_types] if gpu_types else [])],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def spare_node(cluster):
    """The cluster as 1,1,2,2,2, and with host names that are not Slurm's node names (node3's host
    is host3.cluster.test), as on many sites: every blame and exclusion must use Slurm's names."""
    before = _layout()
    _up("1,1,2,2,2", before, "other")
    yield
    _up(before["GPUS"].replace(" ", ","), before, before.get("HOST_NAMES", "same"))
