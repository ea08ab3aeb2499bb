"""A wheel built from the repo, installed in a fresh venv outside the checkout, renders."""
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.timeout(300)
def test_wheel_installs_and_finds_templates(tmp_path):
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(wheels), str(REPO)], check=True, cwd=tmp_path)
    wheel = next(wheels.glob("slurmgen-*.whl"))
    # Python 3.9/3.10 (python_requires >= 3.9) read profiles with tomli, not tomllib.
    with zipfile.ZipFile(wheel) as whl:
        metadata = whl.read(next(n for n in whl.namelist() if n.endswith(".dist-info/METADATA"))).decode()
        # the ranks of a user's own script load it (--rank-hooks)
        assert "train/rank_hooks/sitecustomize.py" in whl.namelist()
        # every generated script sources the job runtime; preflight runs the node report
        assert {"slurmgen/job/runtime.sh", "slurmgen/job/node_report.py"} <= set(whl.namelist())
    assert 'Requires-Dist: tomli>=1.1; python_version < "3.11"' in metadata.splitlines(), metadata
    assert "Requires-Python: >=3.9" in metadata
    fresh = tmp_path / "fresh"
    venv.create(fresh, with_pip=True)
    # Dependencies come from the test venv (no network); slurmgen itself only from the wheel.
    site = Path(sysconfig.get_paths()["purelib"])
    fresh_site = next((fresh / "lib").glob("python3*/site-packages"))
    (fresh_site / "deps.pth").write_text(f"{site}\n")
    subprocess.run([fresh / "bin" / "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
                   check=True, cwd=tmp_path)
    work = tmp_path / "elsewhere"
    work.mkdir()
    result = subprocess.run([fresh / "bin" / "slurmgen", "render", "--nodes", "4", "--gpus", "1,1,2,2", "--module",
                             "train.ddp_loop", "--", "--model_name_or_path", "m", "--dataset", "d", "--output_dir", "o"],
                            cwd=work, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "world size 6" in result.stdout
    assert (work / "generated.sh").read_text().count("exec srun --het-group=") == 2
    runtime = subprocess.run([fresh / "bin" / "python", "-m", "slurmgen.job.runtime"], cwd=work,
                             capture_output=True, text=True, check=True).stdout.strip()
    assert runtime.startswith(str(fresh)) and Path(runtime).is_file(), runtime
    # the names the job runtime shares with the ranks, read from the installed train/contract.py
    contract = subprocess.run([fresh / "bin" / "python", "-c", "import slurmgen.contract as c; print(c._FILE, c.STOP_FILE_ENV)"],
                              cwd=work, capture_output=True, text=True, check=True).stdout.split()
    assert contract[0].startswith(str(fresh)) and contract[1] == "SLURMGEN_STOP_FILE", contract
    where = subprocess.run([fresh / "bin" / "python", "-c",
                            "import slurmgen.script.render as r; print(r.template_dir())"],
                           cwd=work, capture_output=True, text=True, check=True).stdout.strip()
    assert where.startswith(str(fresh)), where


def test_the_train_extra_keeps_a_sites_own_torch():
    """[train] takes a range of torch versions, so installing slurmgen does not replace a site's
    CUDA build; only the Makefile and CI pin the CPU build they test with."""
    import configparser

    from packaging.requirements import Requirement

    cfg = configparser.ConfigParser()
    cfg.read(REPO / "setup.cfg")
    reqs = [Requirement(line) for line in cfg["options.extras_require"]["train"].splitlines()
            if line.strip() and not line.strip().startswith("#")]
    torch = next(r for r in reqs if r.name == "torch")
    assert not any(spec.operator in ("==", "===") for spec in torch.specifier), torch
    assert all(torch.specifier.contains(v) for v in ("2.6.0", "2.13.0", "2.13.0+cu128")), torch
    assert "torch==2.13.0" in (REPO / "Makefile").read_text()
