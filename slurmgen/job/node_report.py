"""One node's preflight report, run by every node's own Python (inside the job's container, if any)
as `python -c "$(cat node_report.py)" KIND TARGET MODEL GPUS`: one SLURMGEN_PREFLIGHT line of JSON
that slurmgen.job.preflight compares across nodes. Standard library only: the image may lack slurmgen."""
import json
import os
import re
import socket
import sys


def installed():
    """Distribution name -> version, from the metadata folders' names on sys.path (name-VERSION.dist-info):
    one listing per folder, where importlib.metadata.version lists them all again for each name (4 ms
    against 45 ms for the seven names here)."""
    found = {}
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        for name in names:
            if name.endswith((".dist-info", ".egg-info")):
                dist, _, ver = name.rsplit(".", 1)[0].partition("-")
                found.setdefault(re.sub(r"[-_.]+", "-", dist).lower(), ver)
    return found


INSTALLED = installed()


def version(name):
    """As importlib.metadata would say, which is asked where a folder's name carries no version."""
    if INSTALLED.get(name, "?"):
        return INSTALLED.get(name, "missing")
    import importlib.metadata  # only here: its import is most of this report's time (34 of 50 ms)
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "missing"


def on_path(name):
    """shutil.which(name) is not None, without importing shutil (8 ms: it imports the compressors)."""
    if os.sep in name:
        return os.access(name, os.X_OK) and not os.path.isdir(name)
    return any(os.access(os.path.join(d, name), os.X_OK) and not os.path.isdir(os.path.join(d, name))
               for d in os.get_exec_path())


def gpu_models():
    """[name, MiB, compute capability] per GPU, from nvidia-smi (none without it)."""
    if not on_path("nvidia-smi"):
        return []
    import subprocess  # only where there is something to run
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,compute_cap", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [[field.strip() for field in line.split(",")] for line in out.splitlines() if line.count(",") == 2]


def slurmgen_version():
    """The __version__ of the slurmgen this Python would import, read from its file (importing it here
    would cost the report its speed), or "missing"."""
    import importlib.util
    try:
        spec = importlib.util.find_spec("slurmgen")
        text = open(spec.origin).read() if spec and spec.origin else ""
    except (ImportError, OSError):
        text = ""
    found = re.search(r"^__version__ = [\"']([^\"']+)[\"']", text, re.M)
    return found.group(1) if found else "missing"


def target_found(kind, target):
    try:
        if kind == "module":
            import importlib.util  # only here, like the others below: 128 nodes' reports share a test machine's cores
            if target.split(".")[0] == "train" and sys.path[:1] == [""]:  # slurmgen's own: never a ./train.py,
                del sys.path[0]  # which find_spec would run (what PYTHONSAFEPATH does, on 3.11+ only)
            return importlib.util.find_spec(target) is not None
        return on_path(target) if kind == "exec" else os.path.isfile(target)
    except ImportError:
        return False


def interfaces_found(nccl_names):
    """NCCL's interface names here: "=" exact names (all needed), "^" names to avoid, else
    prefixes (one match is enough: each node takes its first for gloo)."""
    here = [name for _, name in socket.if_nameindex()]
    wanted = [w for w in nccl_names.lstrip("=").split(",") if w and nccl_names[:1] != "^"]
    if nccl_names[:1] == "=":
        return all(w in here for w in wanted)
    return not wanted or any(name.startswith(w) for w in wanted for name in here)


kind, target, model, expected = sys.argv[1:5]
nccl_names = os.environ.get("NCCL_SOCKET_IFNAME", "")
gpus = [d for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
report = {
    "host": os.environ.get("SLURMD_NODENAME") or socket.gethostname(),
    "python": sys.version.split()[0],  # platform.python_version(), without importing platform
    "torch": version("torch"),
    "nccl": next((v for v in (version("nvidia-nccl-cu%d" % c) for c in (13, 12, 11)) if v != "missing"), "none"),
    **{name: version(name) for name in ("transformers", "trl", "datasets")},
    "slurmgen": slurmgen_version(),
    "gpus": "%d of %s" % (len(gpus), expected),
    "target": "found" if target_found(kind, target) else "MISSING: " + target,
    "interface": "found" if interfaces_found(nccl_names) else "MISSING: " + nccl_names,
    "model": "found" if not model or os.path.exists(model) else "MISSING: " + model,
    "gpu_models": gpu_models(),
}
# One write: every node appends to one file, and print makes two (the line, then its newline)
# where Python's output is unbuffered (PYTHONUNBUFFERED), so another node's line could land between.
sys.stdout.write("SLURMGEN_PREFLIGHT " + json.dumps(report) + "\n")
sys.stdout.flush()
