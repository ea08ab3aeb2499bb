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
        return CliRunner().invoke(cli, list(args), catch_exceptions=False)

    return run


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"
