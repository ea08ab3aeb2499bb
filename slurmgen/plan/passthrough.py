"""The escape hatches for the long tail: --sbatch NAME[=VALUE], --srun-arg ARG, --launcher-arg ARG.

Each refuses what slurmgen writes itself, naming the slurmgen option to use instead, so that a
pass-through can never contradict the layout, the log or the requeue logic it depends on.
"""

from __future__ import annotations

import re

from slurmgen.plan.sbatch_options import ANY_RELEASE, BY_RELEASE, parse_release, release_name
from slurmgen.plan.words import SpecError, printable_line

_LAYOUT = "--nodes and --gpus"
# sbatch options slurmgen writes, and what to use instead.
SBATCH_OWNED = {
    "job-name": "--job-name", "output": "--log-dir and --log-name", "error": "--error-log",
    "open-mode": "nothing: the log is appended to, so that a requeued run keeps the lines before",
    "signal": "--grace", "requeue": "--max-restarts", "no-requeue": "--max-restarts 0",
    "nodes": _LAYOUT, "ntasks": _LAYOUT, "ntasks-per-node": _LAYOUT, "ntasks-per-gpu": _LAYOUT,
    "gres": _LAYOUT, "gpus": _LAYOUT, "gpus-per-node": _LAYOUT, "gpus-per-task": _LAYOUT,
    "gpus-per-socket": _LAYOUT, "cpus-per-task": "--cpus-per-gpu or --cpus-per-node",
    "cpus-per-gpu": "--cpus-per-gpu", "partition": "--partition", "account": "--account",
    "qos": "--qos", "time": "--time", "mem": "--mem", "mem-per-cpu": "--mem-per-cpu",
    "mem-per-gpu": "--mem-per-gpu", "constraint": "--constraint", "nodelist": "--nodelist",
    "exclude": "--exclude", "exclusive": "--exclusive", "reservation": "--reservation",
    "mail-type": "--mail-type", "mail-user": "--mail-user", "hint": "--hint",
    "threads-per-core": "--threads-per-core", "wait-all-nodes": "--wait-all-nodes",
    "dependency": "--after JOB[:ok|any]", "array": "--sweep KEY=V1,V2 and --max-parallel",
}
# Options of the sbatch command rather than of the job: they would change how slurmgen's
# script is read or submitted.
SBATCH_NOT_JOB = {
    "wrap": "the script is slurmgen's", "array": "slurmgen writes one job",
    "test-only": "use slurmgen check", "parsable": "a command-line option of sbatch",
    "wait": "a command-line option of sbatch", "quiet": "a command-line option of sbatch",
    "verbose": "a command-line option of sbatch", "help": "a command-line option of sbatch",
    "usage": "a command-line option of sbatch", "version": "a command-line option of sbatch",
    "batch": "slurmgen writes one batch step", "ignore-pbs": "a command-line option of sbatch",
}
# Job-wide options: written on the first het component only (Slurm takes them from there).
SBATCH_JOB_WIDE = frozenset({
    "begin", "dependency", "deadline", "comment", "hold", "priority", "nice", "kill-on-invalid-dep",
    "wckey", "mail-type", "mail-user", "reservation", "wait-all-nodes", "delay-boot", "chdir",
    "export", "export-file", "get-user-env", "propagate", "licenses", "clusters", "mcs-label",
    "uid", "gid", "acctg-freq", "profile", "time-min",
})

SRUN_OWNED = {
    "nodes": _LAYOUT, "N": _LAYOUT, "ntasks": _LAYOUT, "n": _LAYOUT, "ntasks-per-node": _LAYOUT,
    "gres": _LAYOUT, "gpus": _LAYOUT, "gpus-per-node": _LAYOUT, "gpus-per-task": _LAYOUT,
    "cpus-per-task": "--cpus-per-gpu or --cpus-per-node", "c": "--cpus-per-gpu or --cpus-per-node",
    "het-group": _LAYOUT, "jobid": "nothing: the steps run in this job",
    "kill-on-bad-exit": "nothing: a failing rank always ends the step",
    "K": "nothing: a failing rank always ends the step",
    "export": "--env (the steps need the batch shell's environment)",
    "container-image": "--container-image", "container-mounts": "--container-mounts",
    "container-workdir": "nothing: the container starts in the submit directory",
    "container-name": "nothing: slurmgen names the container per job",
}
_RENDEZVOUS = "nothing: slurmgen sets the rendezvous from the Slurm allocation"
TORCHRUN_OWNED = {
    "nnodes": _LAYOUT, "nproc-per-node": _LAYOUT, "node-rank": _RENDEZVOUS,
    "master-addr": _RENDEZVOUS, "master-port": "--master-port", "rdzv-conf": "--rdzv-timeout",
    "rdzv-backend": _RENDEZVOUS, "rdzv-endpoint": _RENDEZVOUS, "rdzv-id": _RENDEZVOUS,
    "standalone": _RENDEZVOUS, "no-python": "--exec", "module": "--module", "m": "--module",
    "run-path": "--script",
}
ACCELERATE_OWNED = {
    "num-machines": _LAYOUT, "num-processes": _LAYOUT, "machine-rank": _RENDEZVOUS,
    "main-process-ip": _RENDEZVOUS, "main-process-port": "--master-port",
    "rdzv-backend": _RENDEZVOUS, "same-network": _RENDEZVOUS, "multi-gpu": _LAYOUT,
    "no-python": "--exec", "module": "--module", "m": "--module",
}
_SBATCH_NAME = re.compile(r"[a-z][a-z0-9-]*\Z")


def sbatch_known(release=None) -> tuple[frozenset, str]:
    """The sbatch option names of `release` (None: those of any release slurmgen knows) and its name."""
    if release in BY_RELEASE:
        return BY_RELEASE[release], f"sbatch {release_name(release)}"
    return ANY_RELEASE, "sbatch (any release slurmgen knows)"


def split_sbatch(item: str) -> tuple[str, str | None]:
    name, eq, value = item.partition("=")
    return name, (value if eq else None)


def check_sbatch(item: str, release=None) -> None:
    name, value = split_sbatch(item)
    if item.startswith("-"):
        raise SpecError(f"--sbatch {item!r}: give the option without its dashes, e.g."
                        f" --sbatch {item.lstrip('-')}")
    if not _SBATCH_NAME.match(name):
        raise SpecError(f"--sbatch {item!r}: expected an sbatch long option NAME or NAME=VALUE,"
                        " e.g. overcommit or comment=run-7")
    if name in SBATCH_OWNED:
        raise SpecError(f"--sbatch {item!r}: slurmgen writes --{name} itself; use {SBATCH_OWNED[name]}")
    if name in SBATCH_NOT_JOB:
        raise SpecError(f"--sbatch {item!r}: not an option slurmgen can pass on ({SBATCH_NOT_JOB[name]})")
    known, source = sbatch_known(release)
    if name not in known:
        import difflib  # a refusal's hint only

        close = difflib.get_close_matches(name, sorted(known), n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
        raise SpecError(f"--sbatch {item!r}: {source} has no option --{name}{hint}")
    if value is not None and not printable_line(value):
        raise SpecError(f"--sbatch {item!r}: the value must be printable text on one line")


def arg_name(arg: str) -> str:
    """'--cpu-bind=cores' -> 'cpu-bind', '-N2' -> 'N', '--nproc_per_node' -> 'nproc-per-node'."""
    if arg.startswith("--"):
        return arg[2:].split("=", 1)[0].replace("_", "-")
    return arg[1:2]


def check_args(option: str, args, owned: dict) -> None:
    """ARGs are words; a word not starting with '-' is the value of the one before it."""
    previous = None
    for arg in args:
        if not printable_line(arg):
            raise SpecError(f"{option} {arg!r}: must be printable text on one line")
        if not arg.startswith("-") or arg in ("-", "--"):
            if previous is None or "=" in previous:
                raise SpecError(f"{option} {arg!r}: expected an option starting with -"
                                " (a value follows its option, or write OPTION=VALUE)")
        else:
            if " " in arg.split("=", 1)[0]:
                word, _, rest = arg.partition(" ")
                raise SpecError(f"{option} {arg!r}: one word each; write {option}={word}={rest.strip()}"
                                f" or give {option} twice")
            name = arg_name(arg)
            if name in owned:
                shown = arg.split("=", 1)[0] if arg.startswith("--") else arg[:2]
                raise SpecError(f"{option} {arg!r}: slurmgen sets {shown} itself; use {owned[name]}")
        previous = arg if arg.startswith("-") else None


def validate(sbatch, srun_args, launcher: str, launcher_args, slurm_version) -> None:
    """The escape hatches of a job (the spec's fields of those names) checked, for the release given."""
    release = parse_release(slurm_version) if slurm_version else None
    for item in sbatch:
        check_sbatch(item, release)
    check_args("--srun-arg", srun_args, SRUN_OWNED)
    if launcher_args:
        if launcher == "srun":
            raise SpecError(f"--launcher-arg {launcher_args[0]!r}: --launcher srun starts no"
                            " launcher; use --srun-arg for srun's own options")
        owned = TORCHRUN_OWNED if launcher == "torchrun" else ACCELERATE_OWNED
        check_args("--launcher-arg", launcher_args, owned)


def sbatch_lines(sbatch, first: bool) -> list[tuple[str, str | None]]:
    """(name, value or None) of --sbatch options for the first or a later component."""
    pairs = [split_sbatch(item) for item in sbatch]
    return [(n, v) for n, v in pairs if first or n not in SBATCH_JOB_WIDE]
