"""`slurmgen render` runs on login nodes: it must never import torch or transformers."""
import subprocess
import sys


def test_render_does_not_import_torch(tmp_path):
    code = ("import sys\n"
            "from slurmgen.cli import cli\n"
            "sys.argv = ['slurmgen', 'render', '--nodes', '4', '--gpus', '1,1,2,2', '-o', 'job.sh', '--module',"
            " 'train.ddp_loop', '--', '--model_name_or_path', 'm', '--dataset', 'd', '--output_dir', 'o']\n"
            "try:\n    cli()\nexcept SystemExit:\n    pass\n"
            "heavy = sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'transformers', 'trl', 'datasets'})\n"
            "print('heavy:', heavy)\n")
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True)
    assert (tmp_path / "job.sh").exists(), result.stderr
    assert "heavy: []" in result.stdout


def test_help_imports_no_template_engine(tmp_path):
    """`slurmgen --help` and `slurmgen render --help` show options only: jinja2 and the templates are
    imported by the commands that write a script (issue 43: --help under 0.1 s)."""
    for argv in (["slurmgen", "--help"], ["slurmgen", "render", "--help"]):
        code = ("import sys\n"
                "from slurmgen.cli import cli\n"
                f"sys.argv = {argv!r}\n"
                "try:\n    cli()\nexcept SystemExit:\n    pass\n"
                "print('loaded:', sorted({'jinja2', 'slurmgen.script.render'} & set(sys.modules)))\n")
        result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True)
        assert "loaded: []" in result.stdout, (argv, result.stdout[-500:], result.stderr[-2000:])


def test_the_group_alone_imports_click_and_no_command(tmp_path):
    """`slurmgen --help`, `--version` and a mistyped command load no command's module: the group
    lists the commands from its table (issue 43: whole-process `slurmgen --help` under 0.1 s,
    measured by bench/render_speed.py)."""
    for argv in (["slurmgen", "--help"], ["slurmgen", "--version"], ["slurmgen", "rendr"]):
        code = ("import sys\n"
                "from slurmgen.cli import cli\n"
                f"sys.argv = {argv!r}\n"
                "try:\n    cli()\nexcept SystemExit:\n    pass\n"
                "heavy = ('cloup', 'jinja2', 'importlib.metadata', 'slurmgen.')\n"
                "print('loaded:', sorted(m for m in sys.modules if m.startswith(heavy)"
                " and m not in ('slurmgen.cli', 'slurmgen.errors', 'slurmgen.uncollected')))\n")
        result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True)
        assert "loaded: []" in result.stdout, (argv, result.stdout[-800:], result.stderr[-2000:])
