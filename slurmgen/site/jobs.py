"""What Slurm says of a job: `scontrol show job -o` as one record per component, and the one state
that names the job; read by the job runtime, the submit path and `slurmgen watch`."""

from __future__ import annotations

import subprocess


TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
            "PREEMPTED", "BOOT_FAIL", "DEADLINE", "UNKNOWN"}


# When components disagree, the worst one names the job.
_SEVERITY = ["FAILED", "NODE_FAIL", "OUT_OF_MEMORY", "TIMEOUT", "CANCELLED", "BOOT_FAIL",
             "DEADLINE", "PREEMPTED", "RUNNING", "COMPLETING", "REQUEUED", "PENDING", "COMPLETED"]


def job_records(job_id: str) -> list[dict]:
    """One dict per component from `scontrol show job -o` (several lines for a het job, one per
    task or group of pending tasks for a job array). The one place this module runs scontrol."""
    proc = subprocess.run(["scontrol", "show", "job", "-o", str(job_id)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        return []
    return parse_records(proc.stdout)


def parse_records(text: str) -> list[dict]:
    """`scontrol show job -o` output: one dict of KEY=VALUE fields per line."""
    records = []
    for line in text.splitlines():
        fields = {}
        for token in line.split():
            key, sep, value = token.partition("=")
            if sep:
                fields[key] = value
        if fields:
            records.append(fields)
    return records


def overall_state(records: list[dict]) -> str:
    states = [r.get("JobState", "UNKNOWN") for r in records] or ["UNKNOWN"]
    ranked = sorted(states, key=lambda s: _SEVERITY.index(s) if s in _SEVERITY else 0)
    return ranked[0]


NO_VALUE = ("", "(null)", "N/A")


def end_for_good(job_id: str, cancel, timeout: float = 180.0) -> bool:
    """Cancel the job (cancel()) until it has ended for good: one already stopping when the cancel's
    TERM came may still requeue itself. True once no component is left that could (COMPLETING is not
    yet: steps are still ending); False after `timeout` seconds."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        states = {r.get("JobState") for r in job_records(job_id)}
        if states <= TERMINAL:
            return True
        if states & {"PENDING", "REQUEUED", "RUNNING", "CONFIGURING", "SUSPENDED"}:
            cancel()
        time.sleep(1.0)
    return False
