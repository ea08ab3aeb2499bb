"""Profiles: TOML tables of option defaults, `[default]` unless --profile NAME is given.

Looked up as ./slurmgen.toml, else $XDG_CONFIG_HOME/slurmgen/slurmgen.toml (~/.config/...).
Keys are the long option names; command-line options win because profiles only fill click's
default_map. A profile's `setup` lines are shell code that every job runs, so, as ssh does with its
config, a file that another user owns or that others may write is refused.
"""

from __future__ import annotations

import os
import pwd
import re
import shlex
import stat
from typing import TYPE_CHECKING, Optional

from slurmgen.plan.words import SpecError

if TYPE_CHECKING:
    from pathlib import Path

FILE_NAME = "slurmgen.toml"


def profile_file() -> Optional[Path]:
    """This directory's profile, else the user's, else None. Looked for with os.path: pathlib is
    imported only when there is one (every render looks; issue 43)."""
    path = os.path.join(os.getcwd(), FILE_NAME)
    if not os.path.isfile(path):
        config = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
        path = os.path.join(config, "slurmgen", FILE_NAME)
        if not os.path.isfile(path):
            return None
    from pathlib import Path

    return Path(path)


def _owner(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def check_trusted(path: Path) -> None:
    """Refuse a profile owned by another user (root aside) or writable by group or others."""
    info = path.stat()
    if info.st_uid not in (os.getuid(), 0):
        raise SpecError(f"{path}: owned by {_owner(info.st_uid)}, not by you: a profile's setup lines run in"
                        f" every job, so slurmgen uses only your own (copy it, or pass its options instead)")
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise SpecError(f"{path}: writable by others (mode {stat.S_IMODE(info.st_mode):04o}): a profile's"
                        f" setup lines run in every job; make it yours alone with: chmod go-w {shlex.quote(str(path))}")


def _line_of(text: str, key: str) -> int:
    for number, line in enumerate(text.splitlines(), 1):
        if re.match(rf"\s*['\"]?{re.escape(key)}['\"]?\s*=", line):
            return number
    return 0


def _as_option_value(name: str, value, multiple: bool):
    """TOML value -> what click would have parsed from the command line."""
    if name == "gpus" and isinstance(value, list):
        return ",".join(str(v) for v in value)
    if name == "env" and isinstance(value, dict):
        return [f"{k}={v}" for k, v in value.items()]
    if multiple and not isinstance(value, list):
        return [value]
    return value


def toml_parser():
    """The TOML parser, imported only where a file is read: every render looks for a profile."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python < 3.11 (setup.cfg installs tomli there)
        import tomli as tomllib
    return tomllib


def load(name: Optional[str], params: dict, path: Optional[Path] = None) -> tuple[dict, Optional[Path]]:
    """Return (click default_map, file) for profile NAME (or [default]); params: option name -> multiple."""
    path = path or profile_file()
    if path is None:
        if name:
            raise SpecError(f"--profile {name!r}: no {FILE_NAME} in this directory or the user config directory")
        return {}, None
    check_trusted(path)
    text = path.read_text()
    tomllib = toml_parser()
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise SpecError(f"{path}: {err}") from None
    table_name = name or "default"
    if table_name not in data:
        if name:
            raise SpecError(f"--profile {name!r}: {path} has no [{name}] table; it has "
                            f"{', '.join(sorted(data)) or 'none'}")
        return {}, path
    table = data[table_name]
    if not isinstance(table, dict):
        raise SpecError(f"{path}: line {_line_of(text, table_name)}: {table_name} must be a [table]")
    values = {}
    for key, value in table.items():
        option = key.replace("-", "_")
        if option not in params:
            raise SpecError(f"{path}: line {_line_of(text, key)}: unknown option {key!r} in [{table_name}];"
                            f" valid: {', '.join(sorted(k.replace('_', '-') for k in params))}")
        values[option] = _as_option_value(option, value, params[option])
    return values, path
