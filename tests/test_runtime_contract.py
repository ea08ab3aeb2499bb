"""The contract between a rendered script and the job runtime on the nodes (slurmgen.runtime_spec):
one versioned record, read back as written; a runtime of another format refuses it in one line, and
the script refuses a runtime that cannot say its format, both before any step (srun) starts. The
rendezvous the runtime finds from it (slurmgen.job.prepare, slurmgen.job.rendezvous), and preflight's
look at the slurmgen every node imports. Against the real previous release on the local cluster:
tests/e2e/test_contract.py."""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from slurmgen import __version__
from slurmgen.job import preflight, prepare
from slurmgen.plan.layout import materialize
from slurmgen.plan.runtime import runtime_spec
from slurmgen.plan.spec import JobSpec
from slurmgen.runtime_spec import FORMAT, FormatError, RuntimeSpec
from tests.test_script_shims import calls, render_to, shim_env

REPO = Path(__file__).resolve().parent.parent
UNEVEN = JobSpec(gpus=(1, 1, 2, 2), log_dir="/tmp/logs")


def test_the_record_reads_back_as_written_and_says_its_format_and_writer():
    spec = runtime_spec(materialize(UNEVEN.validate()))
    text = spec.to_json()
    assert RuntimeSpec.from_json(text) == spec
    data = json.loads(text)
    assert (data["format"], data["version"]) == (2, __version__) and FORMAT == 2
    assert [c["launch"] for c in data["components"]] == ["component_0", "component_1"]
    assert (data["world_size"], data["max_failures"], data["hang_timeout"], data["stop_wait"]) == (6, 2, 300, 170)
    assert len(text.splitlines()) == len(data) + 1  # a key a line, and a component a line


@pytest.mark.parametrize("found,writer", [(1, "0.1.0"), (3, "0.3.0"), (None, "unknown")])
def test_a_record_of_another_format_is_refused_in_one_line_naming_both(found, writer):
    record = {"format": found, "version": writer} if found else {"world_size": 6}
    with pytest.raises(FormatError) as err:
        RuntimeSpec.from_json(json.dumps(record))
    assert str(err.value) == (f"slurmgen: this script was rendered by slurmgen {writer} (runtime format {found}); the"
                              f" slurmgen on this node, {__version__}, runs runtime format 2: re-render the script with"
                              f" slurmgen {__version__}, or install slurmgen {writer} here")


def job_env(spec: RuntimeSpec, **extra) -> dict:
    return {"SLURM_JOB_ID": "1234", "SLURM_JOB_NODELIST_HET_GROUP_0": "node[1-2]",
            "SLURM_JOB_NODELIST_HET_GROUP_1": "node[3-4]", "SLURMGEN_RUNTIME_SPEC": spec.to_json(), **extra}


def test_the_rendezvous_is_rank_0s_node_and_the_jobs_port_never_an_inherited_one(tmp_path):
    spec = runtime_spec(materialize(JobSpec(gpus=(1, 1, 2, 2), log_dir=str(tmp_path / "logs")).validate()))
    text = prepare.settings(spec, job_env(spec, MASTER_PORT="29500"))  # exported by the submitting shell
    assert "export MASTER_ADDR=node1 MASTER_PORT=21234\n" in text  # 20000 + 1234 % 10000
    assert f"JOB_DIR={tmp_path}/logs/.slurmgen-1234 HET=1\n" in text
    assert "PREFLIGHT=(module train.sft '' )" not in text and "PREFLIGHT=(module train.sft '')\n" in text
    assert "COMPONENT_NODES=(2 2) COMPONENT_GPUS=(1 2)\n" in text
    assert (tmp_path / "logs" / ".slurmgen-1234").is_dir()


def test_an_interface_prefix_gives_the_batch_node_its_own_interface_and_a_missing_one_stops_the_job(tmp_path):
    """lo is every machine's: the prefix 'l' finds it; 'zz' is nobody's, and the job stops in one line."""
    found = runtime_spec(materialize(JobSpec(gpus=(1, 1, 2, 2), log_dir=str(tmp_path), nccl_socket_ifname="l",
                                             master_addr_ip=True).validate()))
    text = prepare.settings(found, job_env(found, SLURMD_NODENAME="node1"))
    assert "export IFACE_PATTERN='^(l)' GLOO_SOCKET_IFNAME=lo\n" in text
    assert "export MASTER_ADDR=127.0.0.1 " in text  # lo's address: rank 0's node is this one
    missing = runtime_spec(materialize(JobSpec(gpus=(1, 1, 2, 2), log_dir=str(tmp_path),
                                               nccl_socket_ifname="zz").validate()))
    with pytest.raises(prepare.rendezvous.RendezvousError, match=r"^slurmgen: --nccl-socket-ifname zz: no interface of"
                                                                 r" \S+ starts so$"):
        prepare.settings(missing, job_env(missing, NCCL_SOCKET_IFNAME="zz"))


def report(host, slurmgen):
    return {"host": host, "python": "3.11", "torch": "2.13", "nccl": "-", "transformers": "5", "trl": "1",
            "datasets": "5", "gpus": "1 of 1", "slurmgen": slurmgen}


def test_preflight_names_a_node_or_an_image_with_another_slurmgen():
    """The ranks import slurmgen (its entry points, the rank hooks): every node's must be the runtime's."""
    reports = [report("node1", "0.2.0"), report("node2", "0.2.0"), report("node3", "0.1.0")]
    found = preflight.verdict(reports, 3, "0.2.0")
    assert not found.passed and found.culprit == "node3"
    assert [line.split() for line in found.lines[1:]] == [["node", "what", "found", "expected"],
                                                          ["node3", "slurmgen", "0.1.0", "0.2.0"]]
    missing = preflight.verdict([report("node1", "missing"), report("node2", "missing")], 2, "0.2.0")
    assert not missing.passed and "slurmgen  missing  0.2.0" in missing.lines[2]  # an image without it
    # a user's own script without the rank hooks imports none: any or none will do
    assert preflight.verdict([report("node1", "missing"), report("node2", "0.1.0")], 2, "").passed


def test_the_node_report_reads_the_version_of_the_slurmgen_its_python_imports(tmp_path):
    old = tmp_path / "old" / "slurmgen"
    old.mkdir(parents=True)
    (old / "__init__.py").write_text('"""an older one"""\n\n__version__ = "0.1.0"\n')
    code = (REPO / "slurmgen" / "job" / "node_report.py").read_text()
    for path, version in ((str(tmp_path / "old"), "0.1.0"), (str(REPO), __version__)):
        out = subprocess.run([sys.executable, "-c", code, "module", "json", "", "0"], capture_output=True, text=True,
                             env={**os.environ, "PYTHONPATH": path}, cwd=tmp_path, check=True).stdout
        assert json.loads(out.split(" ", 1)[1])["slurmgen"] == version


# ---- the script and the runtime of another release, under the stand-ins ------------------------------

def other_release(folder: Path, runtime_main: str) -> Path:
    """A slurmgen whose `python -m slurmgen.job.runtime --format` says what runtime_main prints."""
    package = folder / "slurmgen" / "job"
    package.mkdir(parents=True)
    (folder / "slurmgen" / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "runtime.py").write_text(textwrap.dedent(runtime_main))
    (package / "runtime.sh").write_text('run_job() { echo "the other runtime ran"; }\n')
    return folder


@pytest.mark.parametrize("runtime_main,said", [
    ("print(__file__.replace('.py', '.sh'))\n",  # 0.1.0: the path alone, whatever it is asked
     "is 0.1.0 (runtime format 1, no format said); this script was rendered by slurmgen 0.2.0 (runtime format 2):"
     " install slurmgen 0.2.0 there, or re-render the script with slurmgen 0.1.0"),
    ("print('3 0.3.0', __file__.replace('.py', '.sh'))\n",
     "is 0.3.0 (runtime format 3); this script was rendered by slurmgen 0.2.0 (runtime format 2): install slurmgen"
     " 0.2.0 there, or re-render the script with slurmgen 0.3.0"),
])
def test_the_script_refuses_a_runtime_of_another_format_before_any_step(render_args, tmp_path, runtime_main, said):
    script = render_to(render_args, tmp_path, "--nodes", "4", "--gpus", "1,1,2,2")
    other = other_release(tmp_path / "other", runtime_main)
    proc = subprocess.run(["bash", str(script)], env=shim_env(tmp_path, PYTHONPATH=str(other)),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [f"slurmgen: the slurmgen that {REPO}/tests/shims/python imports on"
                                        f" {os.uname().nodename} {said}"]
    assert "the other runtime ran" not in proc.stdout
    assert not (tmp_path / "calls.jsonl").exists() or calls(tmp_path, "srun") == []


OLD_SETTINGS = """
PYTHON={python} LOGS={logs} PORT_LOW=20000 PORT_SPAN=10000
MAX_RESTARTS=3 MAX_FAILURES=2 HANG_TIMEOUT=300 STOP_WAIT=170
MASTER_ADDR_IP=0 MASTER_IFACE='' IFACE_PATTERN=''
PREFLIGHT=() NET_CHECK=() STRAGGLERS=()
COMPONENT_NAMES=('component 0 (2 node(s) x 1 GPU)' 'component 1 (2 node(s) x 2 GPUs)')
COMPONENT_NODES=(2 2) COMPONENT_GPUS=(1 2)
RUNTIME=$("$PYTHON" -m slurmgen.job.runtime 2>/dev/null)
[[ -f $RUNTIME ]] || {{ echo "slurmgen: $PYTHON on $(hostname) cannot import slurmgen" >&2; exit 1; }}
source "$RUNTIME"
run_job component_0 component_1
"""


def test_a_script_of_the_older_format_is_refused_by_this_runtime_before_any_step(tmp_path):
    """slurmgen 0.1.0's scripts end with their settings as shell variables (STOP_GRACE came later: one such
    script died on `STOP_GRACE: unbound variable` after its queue wait): this runtime says what they are."""
    script = tmp_path / "old.sh"
    script.write_text("#!/bin/bash\nset -uo pipefail\nEARLY_WARNING=0\ncomponent_0() { exit 1; }\ncomponent_1() { exit 1; }\n"
                      + OLD_SETTINGS.format(python=REPO / "tests" / "shims" / "python", logs=tmp_path / "logs"))
    proc = subprocess.run(["bash", str(script)], env=shim_env(tmp_path), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [
        f"slurmgen: this script was rendered by slurmgen 0.1.0 (runtime format 1, no SLURMGEN_RUNTIME_SPEC); the"
        f" slurmgen on this node, {__version__}, runs runtime format 2: re-render the script with slurmgen"
        f" {__version__}, or install slurmgen 0.1.0 here"]
    assert not (tmp_path / "calls.jsonl").exists() or calls(tmp_path, "srun") == []


# slurmgen's own words, not the ranks': the record, a sweep's run, a part's place (--spares),
# the runtime's test knobs, preflight's and the network check's line tags.
NOT_CROSSING = {"SLURMGEN_RUNTIME_SPEC", "SLURMGEN_RUN", "SLURMGEN_FIRST_NODE", "SLURMGEN_FIRST_RANK",
                "SLURMGEN_SETTLE_SECONDS", "SLURMGEN_POLL_SECONDS", "SLURMGEN_PREFLIGHT",
                "SLURMGEN_NETCHECK", "SLURMGEN_SPLIT", "SLURMGEN_SLURM", "SLURMGEN_COMPLETE"}  # the last: click's completion


def test_every_variable_slurmgen_gives_the_ranks_is_named_in_the_contract():
    """train/contract.py defines each SLURMGEN_* name that crosses from slurmgen to the ranks; slurmgen's
    Python, its shell part and its templates use no other (a typo there would be a silent no-op)."""
    import re

    import train.contract

    defined = {v for k, v in vars(train.contract).items() if k.endswith("_ENV")}
    sources = [*(REPO / "slurmgen").rglob("*.py"), *(REPO / "slurmgen").rglob("*.sh"), *(REPO / "templates").glob("*.j2")]
    used = {name for path in sources for name in re.findall(r"SLURMGEN_[A-Z_]+[A-Z]", path.read_text())}
    assert sorted(used - defined - NOT_CROSSING) == []
    assert "SLURMGEN_STRAGGLER_WINDOW" in defined and "SLURMGEN_STOP_FILE" in defined


def test_the_node_report_never_runs_a_train_py_in_the_working_folder(tmp_path):
    """Where PYTHONSAFEPATH does not exist (Python 3.9, 3.10: NGC 24.05) a ./train.py (the seed's file name)
    would be imported, and run, by find_spec("train.sft"): the report looks at slurmgen's own train."""
    (tmp_path / "train.py").write_text("open('ran', 'w').close()\n")
    code = (REPO / "slurmgen" / "job" / "node_report.py").read_text()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONSAFEPATH"}
    out = subprocess.run([sys.executable, "-c", code, "module", "train.sft", "", "0"], capture_output=True, text=True,
                         env={**env, "PYTHONPATH": str(REPO)}, cwd=tmp_path, check=True).stdout
    assert json.loads(out.split(" ", 1)[1])["target"] == "found" and not (tmp_path / "ran").exists()
