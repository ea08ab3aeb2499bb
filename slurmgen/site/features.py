"""Whether a node's features satisfy a Slurm --constraint expression: a100, a100&ib, a100|h100,
[rack1|rack2], (a&b)|c, !a, a100*2; a comma means AND, as in Slurm. Pure."""

from __future__ import annotations

import re
from typing import Optional

# Operators and brackets, a count after a feature (*2, which asks for that many nodes: ignored here), or a name.
_TOKEN = re.compile(r"\s*(\*\d+|[&|,!()\[\]]|[^&|,!()\[\]*\s]+)")


def names(expression: str) -> list[str]:
    """The feature names an expression mentions, in order."""
    return [t for t in _tokens(expression) or [] if t not in "&|,!()[]"]


def judged_per_node(expression: str) -> bool:
    """Whether every node must satisfy the expression itself: not with node counts (a100*2: that
    many nodes with it, the rest need not), not where there is none."""
    return bool(expression) and "*" not in expression


def may_run_on(expression: str, features) -> bool:
    """Whether a node with these features may be one of the nodes asking for this expression (one
    that cannot be judged here may)."""
    return not judged_per_node(expression) or satisfies(expression, features) is not False


def satisfies(expression: str, features) -> Optional[bool]:
    """Whether a node with these features may satisfy the expression; None where it does not parse
    (then Slurm judges it)."""
    tokens = _tokens(expression)
    if not tokens:
        return None
    try:
        value, rest = _either(tokens, set(features))
    except (IndexError, ValueError):
        return None
    return value if not rest else None


def _tokens(expression: str) -> Optional[list[str]]:
    found, at = [], 0
    while at < len(expression.rstrip()):
        match = _TOKEN.match(expression, at)
        if not match:
            return None
        at = match.end()
        if not match.group(1).startswith("*"):
            found.append(match.group(1))
    return found


def _either(tokens: list[str], have: set) -> tuple[bool, list[str]]:
    """A | B | ...; AND binds tighter."""
    value, tokens = _all(tokens, have)
    while tokens and tokens[0] == "|":
        more, tokens = _all(tokens[1:], have)
        value = value or more
    return value, tokens


def _all(tokens: list[str], have: set) -> tuple[bool, list[str]]:
    value, tokens = _one(tokens, have)
    while tokens and tokens[0] in "&,":
        more, tokens = _one(tokens[1:], have)
        value = value and more
    return value, tokens


def _one(tokens: list[str], have: set) -> tuple[bool, list[str]]:
    first, rest = tokens[0], tokens[1:]
    if first == "!":
        value, rest = _one(rest, have)
        return not value, rest
    if first in "([":
        value, rest = _either(rest, have)
        if not rest or rest[0] != {"(": ")", "[": "]"}[first]:
            raise ValueError("unclosed bracket")
        return value, rest[1:]
    if first in "&|,)]":
        raise ValueError(f"unexpected {first}")
    return first in have, rest
