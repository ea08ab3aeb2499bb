"""Sweeps: many runs of one job, one per combination of training-argument values (pure).

`--sweep KEY=V1,V2` (repeatable) gives the Cartesian product of the values (`--sweep-mode zip`
pairs them instead). Every run gets its own output directory under the training arguments'
--output_dir, named after its values, and a `sweep.json` there with those values (read by
`slurmgen report`). A uniform layout runs as one job array; Slurm refuses arrays of
heterogeneous jobs, so an uneven layout runs as one job per run, run i starting after run
i - N has ended (afterany), which keeps at most N (--max-parallel) running at once.
"""

from __future__ import annotations

import itertools
import json
import re
from typing import Optional

from slurmgen.frozen_records import frozen
from slurmgen.plan.words import SpecError, train_arg

MODES = ("product", "zip")
MAX_RUNS = 1000  # Slurm's default MaxArraySize is 1001 (indices 0-1000)
_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")
AFTER_KINDS = {"ok": "afterok", "any": "afterany"}


@frozen
class Run:
    """One run of a sweep: its values and the training arguments they give."""

    index: int
    name: str                           # the output subdirectory, from the values
    values: tuple[tuple[str, str], ...]  # (KEY, VALUE) in --sweep order
    train_args: tuple[str, ...]          # the job's training arguments with these values
    output_dir: str

    def values_json(self) -> str:
        return json.dumps(dict(self.values))

    def label(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.values)


def parse(items, mode: str = "product") -> tuple[tuple[str, tuple[str, ...]], ...]:
    """--sweep KEY=V1,V2 ... -> ((KEY, (V1, V2)), ...), one clear line for bad input."""
    if mode not in MODES:
        raise SpecError(f"--sweep-mode {mode!r}: choose one of {', '.join(MODES)}")
    parsed, seen = [], set()
    for item in items:
        key, sep, values = item.partition("=")
        key = key.strip().lstrip("-")
        if not sep or not _KEY.fullmatch(key):
            raise SpecError(f"--sweep {item!r}: expected KEY=V1,V2,... with KEY a training argument name,"
                            " e.g. learning_rate=1e-4,3e-4")
        words = tuple(v.strip() for v in values.split(","))
        if not all(words) or any(not v.isprintable() for v in words):
            raise SpecError(f"--sweep {item!r}: every value must be non-empty printable text")
        if key in seen:
            raise SpecError(f"--sweep {key}: given twice; give all its values in one --sweep")
        seen.add(key)
        parsed.append((key, words))
    if mode == "zip" and len({len(v) for _, v in parsed}) > 1:
        counts = ", ".join(f"{k}: {len(v)}" for k, v in parsed)
        raise SpecError(f"--sweep-mode zip: every --sweep needs as many values ({counts})")
    return tuple(parsed)


def combinations(sweep, mode: str) -> list[tuple[tuple[str, str], ...]]:
    keys = [k for k, _ in sweep]
    rows = zip(*(v for _, v in sweep)) if mode == "zip" else itertools.product(*(v for _, v in sweep))
    return [tuple(zip(keys, row)) for row in rows]


def _dir_name(values) -> str:
    """learning_rate=1e-4, seed=1 -> learning_rate-1e-4_seed-1; odd characters become '_'."""
    return "_".join(f"{k}-{re.sub(r'[^A-Za-z0-9.+-]', '_', v)}" for k, v in values)


def with_value(args: tuple[str, ...], key: str, value: str) -> tuple[str, ...]:
    """The training arguments with --KEY set to value: replaced where given, else appended."""
    flag, out, i = f"--{key}", [], 0
    replaced = False
    while i < len(args):
        if args[i] == flag and i + 1 < len(args):
            out += [flag, value]
            i, replaced = i + 2, True
            continue
        if args[i].startswith(flag + "="):
            out.append(f"{flag}={value}")
            replaced = True
        else:
            out.append(args[i])
        i += 1
    return tuple(out) if replaced else tuple(out) + (flag, value)


def expand(sweep, mode: str, train_args: tuple[str, ...]) -> list[Run]:
    """The runs, in order; each run's --output_dir is the job's with the run's name below it."""
    base = train_arg(train_args, "--output_dir", "--output-dir")
    if not base:
        raise SpecError("--sweep: give the training argument --output_dir DIR; each run writes to DIR/NAME,"
                        " NAME made of its values")
    rows = combinations(sweep, mode)
    if len(rows) > MAX_RUNS:
        raise SpecError(f"--sweep: {len(rows)} runs; at most {MAX_RUNS} (Slurm's default MaxArraySize)")
    runs, names = [], set()
    for index, values in enumerate(rows):
        name = _dir_name(values)
        if name in names:  # two values that differ only in characters made '_'
            name = f"{name}_{index}"
        names.add(name)
        out = f"{base.rstrip('/')}/{name}"
        args = train_args
        for key, value in values:
            args = with_value(args, key, value)
        for flag in ("output_dir", "output-dir"):
            if train_arg(args, f"--{flag}") is not None:
                args = with_value(args, flag, out)
        runs.append(Run(index, name, values, args, out))
    return runs


def array_spec(count: int, max_parallel: Optional[int]) -> str:
    """sbatch --array for a uniform layout: 0-K[%N]."""
    return f"0-{count - 1}" + (f"%{max_parallel}" if max_parallel and max_parallel < count else "")


def waits_for(count: int, max_parallel: Optional[int]) -> list[Optional[int]]:
    """Het runs: which earlier run each waits for (afterany), so that at most N run at once."""
    n = max_parallel or count
    return [i - n if i >= n else None for i in range(count)]


def parse_after(items) -> tuple[tuple[str, str], ...]:
    """--after JOB[:ok|any] -> ((JOB, afterok|afterany), ...)."""
    out = []
    for item in items:
        job, _, kind = item.partition(":")
        if not re.fullmatch(r"\d+(_\d+)?", job) or kind not in ("", *AFTER_KINDS):
            raise SpecError(f"--after {item!r}: expected JOB[:ok|any], JOB a Slurm job id"
                            " (ok: after it succeeded, the default; any: after it ended)")
        out.append((job, AFTER_KINDS[kind or "ok"]))
    return tuple(out)


def dependency(after, extra: str = "") -> str:
    """Slurm's --dependency value: every condition must hold (comma), e.g. afterok:12:13,afterany:9."""
    kinds: dict[str, list[str]] = {}
    for job, kind in after:
        kinds.setdefault(kind, []).append(job)
    parts = [extra] if extra else []
    parts += [f"{kind}:{':'.join(jobs)}" for kind, jobs in kinds.items()]
    return ",".join(parts)
