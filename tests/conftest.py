import importlib
import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


@pytest.fixture
def render_args(monkeypatch):
    """Run `slurmgen ARGS` in-process with click's runner; sys.argv mirrors it for the header."""
    from click.testing import CliRunner

    from slurmgen.cli import cli

    def run(*args):
        monkeypatch.setattr(sys, "argv", ["slurmgen", *args])
        return CliRunner().invoke(cli, list(args), prog_name="slurmgen", catch_exceptions=False)

    return run


@pytest.fixture(autouse=True)
def no_machine_vetting(request, monkeypatch):
    """In-process commands ask neither this machine's sinfo (the local cluster's 1,1,2,2 would refuse
    the 8-GPU layouts the tests render) nor the training arguments' parser (`check` and `render --check`
    only: seconds, for TRL's import); the tests of those checks ask for them with
    @pytest.mark.machine_vetting. The model check asks nothing, and stays."""
    if request.node.get_closest_marker("machine_vetting"):
        return
    from slurmgen.site import limits, train_args

    monkeypatch.setattr(limits, "Asking", limits.NoAnswer)  # GPU counts held to the stated ceiling
    monkeypatch.setattr(train_args, "start", lambda spec, runs=(), full=True: None)


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def skip_or_fail(reason: str):
    """A test that cannot run here is skipped with the reason, except under CI=true, where everything
    it needs is installed: there the skip would hide a missing install step, so it fails."""
    if in_ci():
        pytest.fail(f"CI=true, yet {reason}")
    pytest.skip(reason)


def need(module: str):
    """The module, imported; skipped where it is missing, except under CI=true (see skip_or_fail)."""
    if in_ci():
        return importlib.import_module(module)
    return pytest.importorskip(module)


def cluster_profile() -> str:
    """The local cluster's profile (tests/localcluster.sh), as the test summary reports it."""
    layout = Path(os.environ.get("SLURMGEN_CLUSTER_DIR", "/tmp/slurmgen-cluster")) / "layout"
    try:
        text = layout.read_text()
    except OSError:
        return "no local cluster"
    profile = next((line.split("=", 1)[1] for line in text.splitlines() if line.startswith("PROFILE=")), "plain")
    return f"local cluster, {profile} profile, Slurm {sbatch_version()}"


def sbatch_version() -> str:
    """The version of the sbatch the tests run (first on PATH): which Slurm the jobs ran on."""
    import subprocess

    try:
        out = subprocess.run(["sbatch", "--version"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "unknown (no sbatch)"
    return out.split()[-1] if out.split() else "unknown"


# Each test's pytest-timeout deadline (its marker's seconds) times this: CI's machine may lose half its
# CPU to its host (steal), and the tests without a cluster run at nice 10 beside the cluster tests, where
# a 40 s test took over 120 s. A deadline only ends a test that is failing or stuck; every assertion on
# time is the test's own.
TIMEOUT_SCALE = float(os.environ.get("SLURMGEN_TEST_TIMEOUT_SCALE", "3" if os.environ.get("CI") == "true" else "1"))


def pytest_collection_modifyitems(config, items):
    if TIMEOUT_SCALE == 1:
        return
    default = float(config.getini("timeout") or 0)  # setup.cfg's, for a test without a marker
    for item in items:
        marker = item.get_closest_marker("timeout")
        seconds = marker.args[0] if marker is not None and marker.args else default
        if seconds:
            item.add_marker(pytest.mark.timeout(seconds * TIMEOUT_SCALE), append=False)


def pytest_report_header(config):
    return f"slurm: {cluster_profile()}"


def pytest_terminal_summary(terminalreporter):
    terminalreporter.write_line(f"end-to-end tests ran on: {cluster_profile()}")


@pytest.fixture(scope="session")
def site(tmp_path_factory) -> Path:
    """The docs site, built once (mkdocs build --strict) for the tests that read it (test_docs.py,
    test_docs_site.py)."""
    import subprocess

    import mkdocs  # noqa: F401  (installed by the Makefile's venv: missing is a failure, not a skip)

    root = Path(__file__).resolve().parent.parent
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]),
           "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(root / "docs" / "mkdocs.yml"),
                           "-d", str(out)], cwd=root, capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return out
