"""The per-user index of slurmgen jobs: one small JSON entry per job, keyed by cluster name and job id
(ids come back after a controller reset), that says where the job's folder and logs are. The job
runtime writes it when a rendered job starts, the submit path when it submits; `slurmgen status`,
`logs`, `cancel` and `list` find a job from its id alone through it. Under $XDG_STATE_HOME/slurmgen
(~/.local/state/slurmgen by default)."""

from __future__ import annotations

import functools
import json
import os
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

RENDERED, SUBMITTED = "rendered", "submitted"


@dataclass
class Entry:
    cluster: str
    job_id: str
    kind: str  # RENDERED (sbatch of a rendered script) or SUBMITTED (slurmgen submit / submitit)
    folder: str  # the job's folder (record.JobFiles): LOG_DIR/.slurmgen-JOBID or SUBMITIT_FOLDER/.slurmgen-JOBID
    logs: list[str] = field(default_factory=list)  # rendered: the job log (and its error log); submitted: none
    task_logs: str = ""  # submitted: rank R's logs are this with {rank} filled in, then .out / .err
    name: str = ""
    command: str = ""  # the batch script, or the training the submit path runs
    world_size: int = 0
    output_dir: str = ""  # where rank 0 writes progress.jsonl and metrics.json ("": not known)
    started: float = 0.0  # seconds since the epoch: the first start (rendered) or the submission

    @classmethod
    def from_json(cls, text: str) -> "Entry":
        data = json.loads(text)
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})


def root() -> Path:
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(state) / "slurmgen" / "jobs"


def path(cluster: str, job_id: str) -> Path:
    return root() / cluster / f"{job_id}.json"


def cluster_name() -> str:
    """This cluster's name: the job's SLURM_CLUSTER_NAME, else scontrol's ClusterName ("slurm" when
    neither says: one cluster's entries stay together)."""
    return os.environ.get("SLURM_CLUSTER_NAME", "") or _configured_name() or "slurm"


@functools.lru_cache(maxsize=1)
def _configured_name() -> str:
    """scontrol's ClusterName, asked once a process (`slurmgen status A B C` looks up three jobs)."""
    try:
        out = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        out = ""
    return next((line.split("=", 1)[1].strip() for line in out.splitlines()
                 if line.split("=", 1)[0].strip() == "ClusterName"), "")


def write(entry: Entry) -> Optional[Path]:
    """Whole or not at all; a job never fails for its index entry (None when it cannot be written)."""
    target = path(entry.cluster, entry.job_id)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f"{target.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(asdict(entry), indent=1) + "\n")
        os.replace(tmp, target)
    except OSError:
        return None
    return target


def read(cluster: str, job_id: str) -> Optional[Entry]:
    try:
        return Entry.from_json(path(cluster, job_id).read_text())
    except (OSError, ValueError, TypeError):
        return None


def find(job_id: str, cluster: str) -> Optional[Entry]:
    """The entry of this job id on this cluster, else the newest of that id on any cluster."""
    found = read(cluster, job_id)
    if found is not None:
        return found
    others = [e for e in map(lambda p: read(p.parent.name, job_id), root().glob(f"*/{job_id}.json")) if e]
    return max(others, key=lambda e: e.started, default=None)


def entries(cluster: str) -> list[Entry]:
    """Every entry of this cluster, newest first."""
    found = [read(cluster, p.stem) for p in (root() / cluster).glob("*.json")]
    return sorted((e for e in found if e), key=lambda e: e.started, reverse=True)
