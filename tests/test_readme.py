"""The README shows the 1,1,2,2 script as slurmgen writes it, and documents every option."""
from pathlib import Path

from slurmgen.options import JOB_OPTIONS

ROOT = Path(__file__).resolve().parent.parent


def test_readme_embeds_the_golden_uneven_script():
    readme = (ROOT / "README.md").read_text()
    assert (ROOT / "tests" / "golden" / "uneven_1_1_2_2.sh").read_text() in readme


def test_readme_documents_every_option():
    readme = (ROOT / "README.md").read_text()
    missing = [decls[0] for decls, _ in JOB_OPTIONS if decls[0].split("/")[0] not in readme]
    assert missing == []


def test_readme_shows_the_current_help():
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    help_text = subprocess.run([str(Path(sys.executable).parent / "slurmgen"), "render", "--help"],
                               capture_output=True, text=True, check=True, env=env).stdout
    assert "\n```\n" + help_text.rstrip("\n") + "\n```\n" in (ROOT / "README.md").read_text()
