"""A slurmgen job found from its id alone, for `slurmgen status`, `logs`, `cancel` and `list`: its
entry in the user's index (slurmgen.job.index) joined with what Slurm says (scontrol) and what the
job's folder holds (its JobRecord, rank 0's progress, a cancel mark); a job the index does not hold
yet (a rendered job still pending) is found through scontrol, beside its log. Rendered and submitted
jobs alike; no torch."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from slurmgen.job import index
from slurmgen.job.record import JobFiles, JobRecord
from slurmgen.observe.watch import beat_progress, last_progress, progress_line
from slurmgen.site.jobs import NO_VALUE, TERMINAL, overall_state

JOB_ID = re.compile(r"\d+")
RUNTIME_FINAL = ("finished", "failed", "cancelled")  # the runtime's states (runtime.State) that end the job
CANCEL_WAIT = 90.0  # seconds a cancel waits for the job's steps to end, cancelling again what comes back


class LifeError(ValueError):
    """The job cannot be found, or asked of: one line."""


class CancelRefused(LifeError):
    """scancel refused the cancel (not your job, say): the mark was taken back; one line."""


@dataclass
class Found:
    entry: index.Entry
    records: list[dict] = field(default_factory=list)  # scontrol's, one per het component; [] once forgotten

    @property
    def files(self) -> JobFiles:
        return JobFiles(Path(self.entry.folder))

    def state(self) -> str:
        """Slurm's state; once Slurm has forgotten the job, the runtime's last word (FINISHED, ...)."""
        if self.records:
            return overall_state(self.records)
        said = JobRecord.load(self.files.record).state
        return "CANCELLED" if self.files.cancel_mark() else (said.upper() or "UNKNOWN")

    def ended(self) -> bool:
        """Whether the job's end is recorded: Slurm says it ended, or (Slurm has forgotten it, or cannot
        be asked) its runtime says it finished, failed or was cancelled."""
        if self.records:
            return overall_state(self.records) in TERMINAL
        return JobRecord.load(self.files.record).state in RUNTIME_FINAL or bool(self.files.cancel_mark())


def check_id(job_id: str) -> str:
    if not JOB_ID.fullmatch(job_id):
        raise LifeError(f"JOB {job_id!r}: not a Slurm job id; give its number (1234), as sbatch or submit printed it")
    return job_id


def locate(job_id: str, records: list[dict], cluster: str) -> Found:
    """The job from the index, else from Slurm's record of it; LifeError when neither knows it."""
    entry = index.find(check_id(job_id), cluster) or (from_slurm(job_id, records[0], cluster) if records else None)
    if entry is None and records:
        raise LifeError(f"job {job_id}: not a slurmgen job (neither your index nor its script says slurmgen made"
                        " it): use Slurm's own commands for it")
    if entry is None:
        raise LifeError(f"job {job_id}: unknown: neither Slurm nor the index of your slurmgen jobs ({index.root()})"
                        " knows it")
    return Found(entry, records)


def find(job_id: str, need_slurm: bool = True) -> Found:
    """The job from its id alone, as the commands and the handles find it (LifeError: one line)."""
    import shutil

    from slurmgen.site.jobs import job_records

    check_id(job_id)
    slurm = shutil.which("scontrol") is not None
    if need_slurm and not slurm:
        raise LifeError("no Slurm here: scontrol is not on PATH (run this where you submit jobs)")
    return locate(job_id, job_records(job_id) if slurm else [], index.cluster_name() if slurm else "slurm")


def cancel_for_good(found: Found, wait: float = CANCEL_WAIT) -> str:
    """`slurmgen cancel`, and a handle's cancel(): final for a rendered job and a submitted one alike.
    The job is marked cancelled in its folder before scancel, so neither its runtime nor its ranks
    requeue it; then it is cancelled again until no step is left (up to `wait` seconds). Returns the
    line to show; CancelRefused when scancel refuses (the mark is taken back)."""
    import subprocess

    from slurmgen.job.record import USER_CANCEL
    from slurmgen.site.jobs import end_for_good

    job_id = found.entry.job_id
    if not found.records or found.ended():  # nothing to mark: a finished job must not read as cancelled
        return f"job {job_id} has already ended: {found.state()}"
    marked_before = bool(found.files.cancel_mark())
    found.files.mark_cancelled(USER_CANCEL)
    done = subprocess.run(["scancel", job_id], capture_output=True, text=True)
    if done.returncode != 0:  # the mark would otherwise end it at its next decision
        if not marked_before:
            found.files.cancelled.unlink(missing_ok=True)
        raise CancelRefused(f"scancel {job_id} failed: {done.stderr.strip() or done.returncode}")
    ended = end_for_good(job_id, lambda: subprocess.run(["scancel", job_id], capture_output=True), wait)
    return (f"job {job_id} cancelled for good: it will not be requeued"
            + ("" if ended else f" (its steps were still ending after {wait:g} s)"))


def from_slurm(job_id: str, record: dict, cluster: str) -> Optional[index.Entry]:
    """A job the index does not hold yet, from scontrol: a submitted job by the record the submit path
    wrote beside its logs, a rendered one by its script; None for a job slurmgen did not make."""
    log = record.get("StdOut", "")
    if log in NO_VALUE:
        return None
    here, name, command = Path(log).parent, record.get("JobName", ""), record.get("Command", "")
    folder = str(JobFiles.of(here, job_id).folder)
    if (here / f"{job_id}_slurmgen.json").is_file():
        return index.Entry(cluster, job_id, index.SUBMITTED, folder, task_logs=str(here / f"{job_id}_{{rank}}_log"),
                           name=name, command=command)
    try:
        script = Path(command).read_text(errors="replace")
    except OSError:
        return None
    if "SLURMGEN_RUNTIME_SPEC" not in script:
        return None
    logs = list(dict.fromkeys(p for p in (log, record.get("StdErr", "")) if p not in NO_VALUE))
    return index.Entry(cluster, job_id, index.RENDERED, folder, logs, name=name, command=command)


def view(found: Found, output_dir: Optional[Path] = None) -> dict:
    """What `status --json` prints for one job (and the human lines are made of); output_dir: where rank 0
    writes its progress (None: the entry's; the step then comes from rank 0's heartbeat where there is none)."""
    entry, records = found.entry, found.records
    first = records[0] if records else {}
    record = JobRecord.load(found.files.record)
    state = found.state()
    reason = first.get("Reason", "") if state == "PENDING" else ""
    output_dir = output_dir or (Path(entry.output_dir) if entry.output_dir else None)
    progress = last_progress(output_dir) or beat_progress(records) or {}
    return {
        "job_id": entry.job_id, "cluster": entry.cluster, "name": entry.name or first.get("JobName", ""),
        "kind": entry.kind, "state": state, "reason": "" if reason in ("None", *NO_VALUE) else reason,
        "step": progress.get("step"), "max_steps": progress.get("max_steps"), "loss": progress.get("loss"),
        "restarts": int(first.get("Restarts", record.restarts) or 0), "runs": len(record.runs),
        "failures": len(record.failures), "excluded": record.excluded,
        "nodes": ",".join(r.get("NodeList", "") for r in records if r.get("NodeList", "") not in NO_VALUE),
        "cancelled_by": found.files.cancel_mark(), "logs": log_paths(entry), "folder": entry.folder,
        "command": entry.command,
    }


def log_paths(entry: index.Entry) -> list[str]:
    if entry.kind == index.SUBMITTED:
        return [entry.task_logs.format(rank="R") + ".out", entry.task_logs.format(rank="R") + ".err"]
    return list(entry.logs)


def human(v: dict) -> str:
    """A job's status for a person: the watch's progress line, then what is known of it."""
    progress = {k: v[k] for k in ("step", "max_steps", "loss") if v[k] is not None}
    lines = [f"job {v['job_id']} ({v['name'] or '-'}, {v['kind']}) "
             + progress_line(v["state"], progress, str(v["restarts"]))]
    for label, value in (("reason", v["reason"]), ("runs", v["runs"] or ""), ("failures", v["failures"] or ""),
                         ("nodes", v["nodes"]), ("excluded", ",".join(v["excluded"])),
                         ("cancelled", f"for good, by {v['cancelled_by']}" if v["cancelled_by"] else ""),
                         ("logs", "  ".join(v["logs"])), ("folder", v["folder"])):
        if value not in ("", None):
            lines.append(f"  {label + ':':<10} {value}")
    return "\n".join(lines)


def listing(cluster: str, records_of: Callable[[str], list], limit: int) -> list[dict]:
    """This user's slurmgen jobs on this cluster, newest first: id, name, kind, state, runs, restarts."""
    rows = []
    for entry in index.entries(cluster)[:limit]:
        found = Found(entry, records_of(entry.job_id))
        record = JobRecord.load(found.files.record)
        first = found.records[0] if found.records else {}
        rows.append({"job_id": entry.job_id, "name": entry.name, "kind": entry.kind, "state": found.state(),
                     "runs": len(record.runs), "restarts": int(first.get("Restarts", record.restarts) or 0),
                     "started": entry.started})
    return rows


def table(rows: list[dict]) -> str:
    import time

    head = f"{'JOB':<10} {'NAME':<16} {'KIND':<9} {'STATE':<11} {'RUNS':>4} {'RESTARTS':>8}  STARTED"
    lines = [head] + [f"{r['job_id']:<10} {r['name'][:16]:<16} {r['kind']:<9} {r['state']:<11} {r['runs']:>4}"
                      f" {r['restarts']:>8}  {time.strftime('%Y-%m-%d %H:%M', time.localtime(r['started']))}"
                      for r in rows]
    return "\n".join(lines)
