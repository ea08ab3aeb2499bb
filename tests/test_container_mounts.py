"""Container jobs keep the node-local beats and the rank hooks (issue 41, item 12): the node's TMPDIR
(or /tmp), where the ranks' node folders are and the hang watch looks from outside, is mounted into
the image at the same path, and so is the host's rank hooks' package, read-only, so that an image
without slurmgen runs them. The last test runs real ranks through the apptainer stand-in with a
private /tmp and only the bound folders visible (tests/private_mounts.sh)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from slurmgen import contract
from slurmgen.job import hangs
from slurmgen.script.render import shell_quote
from slurmgen.submit import spec_from_args
from tests.conftest import skip_or_fail
from tests.test_script_shims import render_to, shim_env

REPO = Path(__file__).resolve().parents[1]


def array(text: str, name: str) -> str:
    """The words of the script's array NAME=(...), as written."""
    line = next(l for l in text.splitlines() if l.startswith(f"{name}=("))
    return line.split("(", 1)[1].rsplit(")  #", 1)[0]


def expand(words: str, **env) -> list[str]:
    """What bash makes of the words of an array, one per line."""
    code = f"set -u; words=({words}); printf '%s\\n' \"${{words[@]}}\""
    return subprocess.run(["bash", "-c", code], capture_output=True, text=True, check=True,
                          env={"SLURM_JOB_ID": "7", **env}).stdout.splitlines()


def rendered(render_args, tmp_path, *args) -> str:
    (tmp_path / "user.py").write_text("")
    result = render_args("render", "-o", "-", "--nodes", "2", "--gpus", "2", "--log-dir", str(tmp_path / "logs"),
                         "--script", str(tmp_path / "user.py"), *args)
    assert result.exit_code == 0, result.stderr
    return result.stdout


def test_pyxis_mounts_the_node_tmpdir_and_the_rank_hooks_read_only(render_args, tmp_path):
    text = rendered(render_args, tmp_path, "--container-image", "img.sqsh", "--container-mounts", "/data:/data")
    words = array(text, "CONTAINER_SRUN")
    logs, hooks = tmp_path / "logs", "/my venv/lib/python3.11/site-packages/train"  # one word each, spaces and all
    mounts = next(w for w in expand(words, SLURM_SUBMIT_DIR="/home/u/p", TMPDIR="/local/job 7",
                                    RANK_HOOKS_PACKAGE=hooks) if w.startswith("--container-mounts="))
    assert mounts == (f"--container-mounts=/data:/data,/home/u/p:/home/u/p,{logs}:{logs},/local/job 7:/local/job 7,"
                      f"{hooks}:{hooks}:ro")
    # Without TMPDIR the ranks beat under /tmp; where the host found no rank hooks, nothing is mounted for them.
    mounts = next(w for w in expand(words, SLURM_SUBMIT_DIR="/home/u/p") if w.startswith("--container-mounts="))
    assert mounts.endswith(f",{logs}:{logs},/tmp:/tmp")
    # The host's hooks go on the ranks' PYTHONPATH, and their package is the folder mounted.
    assert "    RANK_HOOKS_PACKAGE=${RANK_HOOKS%/*}\n" in text and "image_rank_hooks" not in text
    assert "SLURMGEN_RANK_HOOKS_PYTHON" not in text
    assert f"mkdir -p {shell_quote(str(logs))}\n" in text  # not the node's TMPDIR: it exists there


def test_apptainer_binds_the_same_folders(render_args, tmp_path):
    text = rendered(render_args, tmp_path, "--container", "apptainer:/images/t.sif")
    words = expand(array(text, "CONTAINER_EXEC"),
                   SLURM_SUBMIT_DIR="/home/u/p", RANK_HOOKS_PACKAGE="/opt/sg/train")
    logs = tmp_path / "logs"
    assert words == ["apptainer", "exec", "--nv", "--bind",
                     f"/home/u/p,{logs},/tmp,/opt/sg/train:/opt/sg/train:ro",
                     "--pwd", "/home/u/p", "/images/t.sif"]


def test_no_hooks_mount_where_the_ranks_run_no_user_code(render_args, tmp_path):
    result = render_args("render", "-o", "-", "--nodes", "2", "--gpus", "2", "--container-image", "img.sqsh")
    assert result.exit_code == 0, result.stderr
    assert "RANK_HOOKS" not in result.stdout and '"${TMPDIR:-/tmp}":"${TMPDIR:-/tmp}"' in result.stdout
    text = rendered(render_args, tmp_path, "--container-image", "img.sqsh", "--no-rank-hooks")
    assert "RANK_HOOKS" not in text


def test_preflight_asks_the_image_for_slurmgen_only_for_its_entry_points():
    """The rank hooks in an image are the host's, mounted: the image's own slurmgen, if any, is not theirs."""
    from slurmgen.plan.runtime import ranks_import_slurmgen

    def spec(*args):
        return spec_from_args(["--gpus", "2", *args])
    assert ranks_import_slurmgen(spec("--module", "train.sft", "--container-image", "img.sqsh"))
    assert not ranks_import_slurmgen(spec("--module", "mine", "--container-image", "img.sqsh"))
    assert ranks_import_slurmgen(spec("--module", "mine"))  # the nodes' own, on the host
    assert not ranks_import_slurmgen(spec("--module", "mine", "--no-rank-hooks"))


# A user's script in an image that has no slurmgen: the rank hooks (found by Python as sitecustomize,
# from the host's folder) beat for it, as they do at each optimizer step. It ends like a killed rank
# (no exit handlers), so that its node folder stays for the test to look at.
USER_SCRIPT = """
import os, sys, time
hooks = sys.modules.get("sitecustomize")
if not hasattr(hooks, "ours"):
    sys.exit("no rank hooks in the image")
beat = hooks.ours("heartbeat").beat
for step in range(1, 4):
    beat(step)
    time.sleep(0.1)
time.sleep({publish} + 1)  # the node's last beats published (train.heartbeat's trailing publication)
os._exit(0)
"""


def own_train_packages() -> list[str]:
    """The train packages the job's Python finds on its own (an editable install's), besides this checkout's."""
    found = subprocess.run([sys.executable, "-c", "import train; print(*train.__path__)"], cwd="/",
                           env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
                           capture_output=True, text=True).stdout.split()
    return sorted({str(REPO / "train"), *found})


def test_ranks_in_an_image_beat_on_their_node_and_run_the_host_s_hooks(render_args, tmp_path):
    """2 nodes of 2 ranks (--launcher srun) in the apptainer stand-in: the ranks' /tmp is their own and
    slurmgen's train packages are hidden, as in an image without slurmgen. The ranks still load the
    rank hooks (the host's package, bound read-only) and beat into a folder on their node, in the host's
    TMPDIR, where the hang watch looks; the shared folder gets one file per node, none per rank."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        skip_or_fail("the apptainer stand-in's mount namespaces need root and unshare")
    work, node_tmp = tmp_path / "work", tmp_path / "node-tmp"
    work.mkdir()
    node_tmp.mkdir()
    (work / "user.py").write_text(USER_SCRIPT.format(publish=contract.PUBLISH_SECONDS))
    script = render_to(render_args, tmp_path, "--nodes", "2", "--gpus", "2", "--launcher", "srun",
                       "--python", sys.executable, "--script", str(work / "user.py"),
                       "--container", "apptainer:/images/t.sif")
    env = shim_env(tmp_path, SLURM_SUBMIT_DIR=str(work), TMPDIR=str(node_tmp), PYTHONPATH=str(REPO),
                   APPTAINER_STANDIN_HIDE=":".join(own_train_packages()))
    proc = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=120, cwd=work)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "without the rank hooks" not in proc.stderr

    beats = tmp_path / "logs" / ".slurmgen-1234" / "beats"
    host = os.uname().nodename
    # One publication file per node (its part's first rank in the name), no rank's own file.
    assert sorted(p.name for p in beats.iterdir() if p.name.startswith(("node-", "rank-"))) == [
        f"node-{host}-0", f"node-{host}-2"]
    assert {r: b.step for r, b in hangs.read_beats(beats).items()} == {0: 3, 1: 3, 2: 3, 3: 3}
    # The node folders are on the host, where the hang watch's look (hangs._DUMP) finds the ranks.
    folders = sorted(node_tmp.glob("slurmgen-beats-1234-0-*"))
    assert [f.name.endswith(f"-{host}-{first}") for f, first in zip(folders, (0, 2))] == [True, True], folders
    assert [sorted(p.name for p in f.glob("rank-*")) for f in folders] == [["rank-0", "rank-1"], ["rank-2", "rank-3"]]
    assert [p.name for p in (tmp_path / "logs" / ".slurmgen-1234" / "beats").glob("stack-*")] != []  # the hooks' dump
