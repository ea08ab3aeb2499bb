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
