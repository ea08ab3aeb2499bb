"""The batch shell's first call (runtime.sh's run_job): the script's runtime spec read and its format
checked, the rendezvous found, the job's folder made; the result as shell assignments for the shell
part and the steps it starts. Where any of it fails: one line and status 1, before any step."""

from __future__ import annotations

import os
import re
import shlex
import sys
from typing import Mapping

from slurmgen import contract
from slurmgen.job import rendezvous
from slurmgen.job.record import JobFiles
from slurmgen.runtime_spec import SPEC_ENV, FormatError, RuntimeSpec, older_script_line


def words(values) -> str:
    return " ".join(shlex.quote(str(v)) for v in values)


def settings(spec: RuntimeSpec, env: Mapping[str, str]) -> str:
    """The shell's assignments: the job's folder and files, the rendezvous, what the steps read."""
    files = JobFiles.of(spec.logs, env.get("SLURM_JOB_ID", "0"))
    het = len(spec.groups) > 1  # the spares make a group too
    gloo = rendezvous.gloo_iface(spec.iface_prefixes, env.get("NCCL_SOCKET_IFNAME", "")) if spec.iface_prefixes else ""
    node = rendezvous.first_node(env, het)
    addr = rendezvous.master_addr(node, spec.master_addr_ip, spec.master_iface or gloo, env)
    port = rendezvous.master_port(spec.master_port, spec.port_range, spec.port_per_run, env)
    if env.get("SLURM_RESTART_COUNT", "0") in ("", "0"):  # the job's first run: what is there is another job's
        files.clear_job()  # (a job id that came back: another cluster, a reset counter)
    files.folder.mkdir(parents=True, exist_ok=True)
    files.stop.unlink(missing_ok=True)  # an earlier run's
    preflight = spec.preflight
    lines = [
        f"JOB_DIR={shlex.quote(str(files.folder))} HET={int(het)}",
        # What the ranks read and write: the stop file (made at a warning), rank 0's word on how
        # training ended ("stopped|finished STEP"), and one heartbeat file per rank.
        f"export {contract.STOP_FILE_ENV}={shlex.quote(str(files.stop))} {contract.OUTCOME_FILE_ENV}="
        f"{shlex.quote(str(files.outcome))} {contract.HEARTBEAT_DIR_ENV}={shlex.quote(str(files.beats))}",
        f"export MASTER_ADDR={shlex.quote(addr)} MASTER_PORT={port}",
        f"PREFLIGHT=({words([preflight.kind, preflight.target, preflight.model] if preflight else [])})",
        f"COMPONENT_NODES=({words(n for n, _ in spec.groups)}) COMPONENT_GPUS=({words(g for _, g in spec.groups)})",
    ]
    if spec.stragglers:  # the ranks time their forward passes over the window (train/compute_time.py)
        lines.append(f"export {contract.STRAGGLER_WINDOW_ENV}={spec.stragglers.window}")
    if gloo:  # each step's node takes its own interface (runtime.sh's node_iface), this one too
        pattern = "^(" + "|".join(re.escape(p) for p in spec.iface_prefixes) + ")"
        lines.append(f"export IFACE_PATTERN={shlex.quote(pattern)} GLOO_SOCKET_IFNAME={shlex.quote(gloo)}")
    return "\n".join(lines) + "\n"


def say_format(runtime_sh) -> None:
    """For `python -m slurmgen.job.runtime --format`: "FORMAT VERSION PATH" (bare: the path alone, which
    is all 0.1.0's scripts ask, so that this runtime can say what they are)."""
    from slurmgen import __version__
    from slurmgen.runtime_spec import FORMAT

    print(f"{FORMAT} {__version__} {runtime_sh}" if sys.argv[1:] == ["--format"] else runtime_sh)


def main() -> int:
    text = os.environ.get(SPEC_ENV)
    try:
        if not text:
            raise FormatError(older_script_line())
        sys.stdout.write(settings(RuntimeSpec.from_json(text), os.environ))
    except (FormatError, rendezvous.RendezvousError) as err:
        print(err, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
