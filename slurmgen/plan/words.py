"""The vocabulary of user values: SpecError, and the parsers of counts, times, sizes and training
arguments that the spec, sweeps and the other option checks share."""

from __future__ import annotations

import itertools
import re
import unicodedata
from typing import Optional


# Patterns as text, compiled where first used (re keeps them): compiling them all at import cost
# every render (issue 43), and most use none.
_ENV_NAME = r"[A-Za-z_][A-Za-z0-9_]*\Z"


# Slurm --time forms: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S; ASCII digits only (re.A), as Slurm reads them.
_TIME_FORMS = (
    (r"(?a)(\d{1,9})\Z", ("m",)),
    (r"(?a)(\d{1,9}):(\d{1,2})\Z", ("m", "s")),
    (r"(?a)(\d{1,9}):(\d{1,2}):(\d{1,2})\Z", ("h", "m", "s")),
    (r"(?a)(\d{1,9})-(\d{1,9})\Z", ("d", "h")),
    (r"(?a)(\d{1,9})-(\d{1,9}):(\d{1,2})\Z", ("d", "h", "m")),
    (r"(?a)(\d{1,9})-(\d{1,9}):(\d{1,2}):(\d{1,2})\Z", ("d", "h", "m", "s")),
)
# The forms as the help and the errors name them.
TIME_FORMS_TEXT = "MINUTES, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS"


_UNIT_SECONDS = {"d": 86400, "h": 3600, "m": 60, "s": 1}


def printable_line(text: str) -> bool:
    """Non-empty, no control characters or line breaks (any script, any symbol, any space)."""
    return bool(text) and not any(unicodedata.category(c)[0] == "C" or c in "\u2028\u2029\x85"
                                  for c in text)


class SpecError(ValueError):
    """A user value is not acceptable; the message is the one line shown to the user."""


# The most nodes one job may name: beyond any cluster's size, and it keeps a typo such as
# --nodes 99999999999 or 8x99999999999 from building a list of that many counts (or overflowing).
MAX_NODES = 65536


def _digits(text: str) -> bool:
    """ASCII digits only: str.isdigit() also takes '²', which int() refuses."""
    return text.isascii() and text.isdigit()


def _too_long(text: str) -> bool:
    """More digits than any count of nodes or GPUs (int() refuses 4,300 digits and more)."""
    return _digits(text) and len(text.lstrip("0")) > 9


def _expand_counts(text: str) -> tuple[list[str], list[int]]:
    """'8x2,4' -> (['8x2', '4'], [8, 8, 4]); SpecError names the part that is not a count."""
    counts: list[int] = []
    parts = [p.strip() for p in str(text).split(",")]
    for part in parts:
        count, sep, repeat = part.partition("x")
        if _too_long(count) or _too_long(repeat):
            raise SpecError(f"--gpus {text!r}: {part!r} is too large")
        if not _digits(count) or int(count) < 1:
            raise SpecError(f"--gpus {text!r}: {part!r} is not a positive integer GPU count")
        if sep and (not _digits(repeat) or int(repeat) < 1):
            raise SpecError(f"--gpus {text!r}: {part!r} should be COUNTxNODES, e.g. 8x4")
        if len(counts) + (int(repeat) if sep else 1) > MAX_NODES:
            raise SpecError(f"--gpus {text!r}: more than {MAX_NODES} nodes")
        counts += [int(count)] * (int(repeat) if sep else 1)
    return parts, counts


def parse_gpus(text: str, nodes: int) -> tuple[int, ...]:
    """'1,1,2,2' -> (1, 1, 2, 2); '8x512,4x512' repeats a count; a single count applies to every node."""
    if nodes < 1:
        raise SpecError(f"--nodes {nodes}: must be a positive integer")
    if nodes > MAX_NODES:
        raise SpecError(f"--nodes {nodes}: at most {MAX_NODES} nodes")
    parts, counts = _expand_counts(text)
    if len(parts) == 1 and "x" not in parts[0]:
        return tuple(counts * nodes)
    if len(counts) != nodes:
        raise SpecError(
            f"--gpus {text!r}: {len(counts)} counts given for --nodes {nodes};"
            f" give one count per node or a single count for all"
        )
    return tuple(counts)


def per_node(value: Optional[str], nodes: int) -> tuple[str, ...]:
    """An option's value for each node: a comma-separated list of exactly one entry per node, else
    the whole value on every node ("" where not given)."""
    parts = (value or "").split(",")
    return tuple(parts) if len(parts) == nodes else (value or "",) * nodes


def count_runs(counts) -> list[tuple[int, int]]:
    """(1, 1, 2, 2) -> [(1, 2), (2, 2)]: each count with the number of nodes in its run."""
    return [(count, len(list(run))) for count, run in itertools.groupby(counts)]


def compact_gpus(text: str) -> str:
    """--gpus as written -> the same layout with runs of three or more as COUNTxNODES, so that
    1,024 counts written out record as '8x512,4x512'; text that is not a layout is kept."""
    try:
        _, counts = _expand_counts(text)
    except SpecError:
        return text
    words = [f"{c}x{n}" if n >= 3 else ",".join([str(c)] * n) for c, n in count_runs(counts)]
    compact = ",".join(words)
    return compact if len(compact) < len(text) else text


def parse_time(text: str) -> Optional[int]:
    """Slurm --time to seconds; None for UNLIMITED/INFINITE."""
    if text.upper() in ("UNLIMITED", "INFINITE"):
        return None
    for pattern, units in _TIME_FORMS:
        match = re.match(pattern, text)
        if match:
            return sum(int(v) * _UNIT_SECONDS[u] for v, u in zip(match.groups(), units))
    raise SpecError(f"--time {text!r}: not a Slurm time; use {TIME_FORMS_TEXT}")


def describe_seconds(seconds: int) -> str:
    """90061 -> '1 d 1 h 1 min 1 s': a time limit as a reader checks it (25:00 is 25 minutes)."""
    parts, left = [], seconds
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60), ("s", 1)):
        if left >= size or (unit == "s" and not parts):
            parts.append(f"{left // size} {unit}")
            left %= size
    return " ".join(parts)


def parse_env(items) -> tuple[tuple[str, str], ...]:
    pairs = []
    for item in items:
        if "=" not in item:
            raise SpecError(f"--env {item!r}: expected KEY=VALUE")
        key, value = item.split("=", 1)
        if not re.match(_ENV_NAME, key):
            raise SpecError(
                f"--env {item!r}: {key!r} is not a valid variable name"
                " (letters, digits and _, not starting with a digit)"
            )
        pairs.append((key, value))
    return tuple(pairs)


def scale_mem(size: str, factor: int) -> str:
    """'16G' x 2 -> '32G': memory for a node of `factor` GPUs, in the unit it was given in."""
    if size[-1].isalpha():
        return f"{int(size[:-1]) * factor}{size[-1]}"
    return str(int(size) * factor)


def parse_port_range(text: str) -> tuple[int, int]:
    match = re.match(r"(\d{1,9})-(\d{1,9})\Z", str(text), re.A)
    if not match:
        raise SpecError(f"--port-range {text!r}: expected LOW-HIGH, e.g. 20000-29999")
    low, high = int(match.group(1)), int(match.group(2))
    if not 1024 <= low <= high <= 65535:
        raise SpecError(f"--port-range {text!r}: need 1024 <= LOW <= HIGH <= 65535")
    return low, high


def train_arg(args, *flags: str) -> Optional[str]:
    """The value a training argument (--flag VALUE or --flag=VALUE) was given; the last one wins,
    as it does for the argument parsers of the entry points. None if absent or valueless."""
    args = list(args)
    value = None
    for i, arg in enumerate(args):
        for flag in flags:
            if arg == flag and i + 1 < len(args):
                value = args[i + 1]
            elif arg.startswith(flag + "="):
                value = arg.split("=", 1)[1]
    return value


_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([KMGT]?)(?:I?B)?", re.I | re.A)


_SCALE = {"": 1 / 1024, "K": 1 / 1024 ** 2, "M": 1 / 1024, "G": 1, "T": 1024}  # bare number: MB, as Slurm


def parse_sizes(option: str, text: str, nodes: int, unit_default: str = "G") -> tuple[float, ...]:
    """'80G' or '24G,24G,80G,80G' -> GiB per node."""
    parts = [p.strip() for p in str(text).split(",")]
    values = []
    for part in parts:
        m = _SIZE.fullmatch(part)
        if not m or float(m.group(1)) <= 0:
            raise SpecError(f"{option} {text!r}: {part!r} is not a size like 80G (one for every node, or one per node)")
        values.append(float(m.group(1)) * _SCALE[(m.group(2) or unit_default).upper()])
    if len(values) == 1:
        values *= nodes
    if len(values) != nodes:
        raise SpecError(f"{option} {text!r}: {len(values)} sizes for {nodes} nodes; give one, or one per node")
    return tuple(values)
