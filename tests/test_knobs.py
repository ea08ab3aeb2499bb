"""Multi-node knobs: NCCL, shared HF cache and offline mode, pyxis containers only when asked."""
import subprocess


def render_text(render_args, *args):
    result = render_args("render", "-o", "-", "--nodes", "2", "--gpus", "2", *args)
    assert result.exit_code == 0, result.stderr
    return result.stdout, result.stderr


def test_nccl_and_cache_exports(render_args, tmp_path):
    text, _ = render_text(
        render_args, "--nccl-debug", "info", "--nccl-socket-ifname", "^docker,lo",
        "--hf-home", str(tmp_path / "hf cache"), "--offline")
    assert "export NCCL_DEBUG=INFO\n" in text
    assert "export NCCL_SOCKET_IFNAME='^docker,lo'\n" in text
    # gloo takes plain names only: an NCCL exclusion list must not reach it (gloo would look
    # for an interface called "^docker").
    assert "export GLOO_SOCKET_IFNAME" not in text and "GLOO_SOCKET_IFNAME=" not in text
    assert f"export HF_HOME='{tmp_path}/hf cache'\n" in text
    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        assert f"export {var}=1\n" in text


def test_gloo_gets_nccls_interface_names_in_its_own_terms(render_args):
    text, _ = render_text(render_args, "--nccl-socket-ifname", "=eth0,eth1")
    assert "export NCCL_SOCKET_IFNAME='=eth0,eth1'\n" in text
    assert "export GLOO_SOCKET_IFNAME='eth0,eth1'\n" in text
    # A plain list is prefixes to NCCL: the script finds its node's exact name for gloo.
    text, _ = render_text(render_args, "--nccl-socket-ifname", "ib,eth")
    assert "export NCCL_SOCKET_IFNAME='ib,eth'\n" in text
    assert '"iface_prefixes": ["ib", "eth"]' in text  # the job runtime's node_iface looks them up on each node
    # ... on every node, in every launch step, not once on the batch host for all.
    launch = [line for line in text.splitlines() if "bash -c '" in line]
    assert launch and all("bash -c 'node_iface || exit; exec" in line for line in launch)
    assert "export GLOO_SOCKET_IFNAME=ib" not in text


def test_an_interface_prefix_resolves_on_the_node_or_stops_the_job(render_args, tmp_path):
    """Run under the stand-ins: a prefix of an interface this machine has gives every rank its
    exact name, also for --master-addr-ip's address; one that matches nothing is one line, exit 1."""
    import os
    import sys

    from tests.test_script_shims import SHIMS, calls, shim_env

    name = sorted(os.listdir("/sys/class/net"))[0]  # lo, or whatever comes first
    record = tmp_path / "record.py"
    record.write_text("import json, os\n"
                      "with open(os.environ['SHIM_LOG'], 'a') as log:\n"
                      "    log.write(json.dumps({'tool': 'task', 'env': {k: os.environ.get(k) for k in"
                      " ('GLOO_SOCKET_IFNAME', 'MASTER_ADDR')}}) + '\\n')\n")
    for prefix, status in ((name[:1], 0), ("zzq", 1)):
        script = tmp_path / f"job-{prefix}.sh"
        result = render_args("render", "-o", str(script), "--log-dir", str(tmp_path / "logs"), "--no-preflight", "--no-net-check",
                             "--nodes", "2", "--gpus", "1", "--launcher", "srun", "--python", sys.executable,
                             "--script", str(record), "--nccl-socket-ifname", prefix)
        assert result.exit_code == 0, result.output
        proc = subprocess.run(["bash", str(script)], env=shim_env(tmp_path, SLURM_JOB_NODELIST="node[1-2]"),
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == status, proc.stdout + proc.stderr
    tasks = [c["env"] for c in calls(tmp_path, "task")]
    assert len(tasks) == 2 and {t["GLOO_SOCKET_IFNAME"] for t in tasks} == {name}
    assert f"slurmgen: --nccl-socket-ifname zzq: no interface of {os.uname().nodename} starts so\n" in proc.stderr


def test_containers_only_when_asked(render_args, tmp_path):
    plain, _ = render_text(render_args)
    assert "--container" not in plain and "NCCL_DEBUG" not in plain and "HF_HOME" not in plain
    logs = tmp_path / "my logs"
    boxed, _ = render_text(render_args, "--log-dir", str(logs),
                           "--container-image", "nvcr.io#nvidia/pytorch:24.01-py3",
                           "--container-mounts", "/data:/data", "--", "--output_dir", "/scratch/run")
    # Every step's srun takes the pyxis flags: both training steps, and preflight's (the job runtime's).
    srun_lines = [l for l in boxed.splitlines() if l.lstrip().startswith("exec srun ")]
    assert len(srun_lines) == 1 and 'exec srun "${CONTAINER_SRUN[@]}" --nodes=2' in srun_lines[0]
    flags = next(l for l in boxed.splitlines() if l.startswith("CONTAINER_SRUN=("))
    assert "--container-image='nvcr.io#nvidia/pytorch:24.01-py3'" in flags
    # One name per job: every step after the first reuses the imported image on its node.
    assert '--container-name=slurmgen-"$SLURM_JOB_ID"' in flags
    assert '--container-workdir="$SLURM_SUBMIT_DIR"' in flags
    # What the shell makes of the mounts: the user's, then the working, log and output dirs
    # (stop and outcome files, checkpoints) at the same path inside, and the node's TMPDIR, where
    # the ranks beat on their node (tests/test_container_mounts.py).
    mounts = flags.split("--container-mounts=", 1)[1].split(" --container-workdir=")[0]
    expanded = subprocess.run(["bash", "-c", f"printf %s {mounts}"], capture_output=True, text=True,
                              env={"SLURM_SUBMIT_DIR": "/home/u/proj"}).stdout
    expanded = "--container-mounts=" + expanded
    assert expanded == (f"--container-mounts=/data:/data,/home/u/proj:/home/u/proj,{logs}:{logs},"
                        "/scratch/run:/scratch/run,/tmp:/tmp")
    assert f"mkdir -p '{logs}' /scratch/run\n" in boxed


def test_bad_nccl_level(render_args):
    result = render_args("render", "-o", "-", "--nccl-debug", "LOUD")
    assert result.exit_code == 2
    assert result.stderr == "slurmgen: error: --nccl-debug 'LOUD': choose one of VERSION, WARN, INFO, TRACE\n"


def test_offline_with_local_paths_needs_no_fetch(render_args, tmp_path):
    _, err = render_text(render_args, "--offline", "--", "--model_name_or_path", str(tmp_path))
    assert "fetching" not in err


def test_offline_fetch_failure_is_one_line_and_writes_nothing(render_args, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # no hub here: the fetch must fail, and say so
    result = render_args("render", "--offline", "--hf-home", str(tmp_path / "hf"), "--",
                         "--model_name_or_path", "someorg/some-model")
    assert result.exit_code == 1
    assert result.stderr.splitlines()[-1].startswith(
        "slurmgen: error: --offline: cannot fetch model 'someorg/some-model': ")
    assert not (tmp_path / "generated.sh").exists()


def test_offline_missing_local_path_is_not_fetched(render_args, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = render_args("render", "--offline", "--", "--model_name_or_path", "./models/typo")
    assert result.exit_code == 1
    assert result.stderr == ("slurmgen: error: --model_name_or_path './models/typo': no such local path,"
                             " and not a hub name (OWNER/NAME)\n")


def test_master_port_is_one_rule_for_scripts_and_tasks_and_never_the_inherited_one():
    """The rendered script's runtime and the submit path's tasks take the port from one function of
    the job id (slurmgen.job.rendezvous); an exported MASTER_PORT of the submitting shell is not it."""
    from slurmgen.job.rendezvous import job_port, master_port

    # the expected ports worked out by hand: low + job id modulo the range's size
    expected = {(20000, 29999): {1: 20001, 7: 20007, 10_007: 20007, 123_456_789: 26789},
                (31000, 31007): {1: 31001, 7: 31007, 10_007: 31007, 123_456_789: 31005}}
    for port_range, ports in expected.items():
        for job_id, port in ports.items():
            env = {"SLURM_JOB_ID": str(job_id), "MASTER_PORT": "29500"}
            assert job_port(str(job_id), port_range) == master_port(None, port_range, False, env) == port
    assert master_port(31000, (20000, 29999), False, {"MASTER_PORT": "29500"}) == 31000  # --master-port
    assert master_port(31000, (20000, 29999), True, {"SLURM_ARRAY_TASK_ID": "3"}) == 31003  # a sweep's run 3
    assert master_port(31000, (20000, 29999), True, {"SLURMGEN_RUN": "2"}) == 31002  # a het sweep's run 2


def test_exclusive_whole_nodes_for_every_component(render_args):
    """Het components may otherwise share a node; --exclusive asks Slurm for whole nodes in each."""
    text, _ = render_text(render_args, "--nodes", "4", "--gpus", "1,1,2,2", "--exclusive")
    components = text.split("#SBATCH hetjob")
    assert len(components) == 2 and all("#SBATCH --exclusive\n" in c for c in components)
    plain, _ = render_text(render_args)
    assert "--exclusive" not in plain


def test_exclusive_reaches_the_submit_path():
    from slurmgen.submit import submission
    from slurmgen.plan.spec import JobSpec

    assert submission.slurm_parameters(JobSpec(gpus=(1, 2), exclusive=True))["exclusive"] is True
    assert "exclusive" not in submission.slurm_parameters(JobSpec(gpus=(1, 2)))


def test_preflight_checks_the_interface_names_on_each_node():
    """The preflight report that every node runs: NCCL's prefixes need a match there, an exact
    list every name, an exclusion list nothing (the node's own namespace, as Python sees it)."""
    import json
    import os
    import socket
    import sys

    from slurmgen.job import runtime

    report = (runtime.RUNTIME.parent / "node_report.py").read_text()
    here = sorted(name for _, name in socket.if_nameindex())[0]
    nccl_version = next((v for v in (_version(f"nvidia-nccl-cu{c}") for c in (13, 12, 11)) if v), "none")
    expected = {here[:1]: "found", "zzq": "MISSING: zzq", f"={here}": "found", f"={here},zzq0": f"MISSING: ={here},zzq0",
                "^docker": "found", "": "found"}
    for nccl, verdict in expected.items():
        run = subprocess.run([sys.executable, "-c", report, "module", "json", "", "0"], capture_output=True, text=True,
                             env=dict(os.environ, NCCL_SOCKET_IFNAME=nccl))
        assert run.returncode == 0, run.stderr
        found = json.loads(run.stdout.split(" ", 1)[1])
        assert found["interface"] == verdict, nccl
        assert found["nccl"] == nccl_version  # NCCL's own version, whatever the interfaces are


def test_the_node_report_says_every_version_as_importlib_metadata_does():
    """It reads the versions from the metadata folders' names, once (node_report.installed); for
    every distribution installed here that is what importlib.metadata says."""
    import importlib.metadata
    import runpy
    import sys

    from slurmgen.job import runtime

    argv, sys.argv = sys.argv, ["node_report", "module", "json", "", "0"]
    try:
        found = runpy.run_path(str(runtime.RUNTIME.parent / "node_report.py"))["INSTALLED"]
    finally:
        sys.argv = argv
    names = {d.metadata["Name"] for d in importlib.metadata.distributions()}
    assert len(names) > 50  # torch, transformers and what they need
    for name in names:
        key = name.replace("_", "-").replace(".", "-").lower()
        assert found.get(key) in (importlib.metadata.version(name), ""), name


def _version(name):
    import importlib.metadata

    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None
