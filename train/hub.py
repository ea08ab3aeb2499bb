"""Checks against the Hugging Face hub: is a model name a local directory, a hub id, or
neither, and is a hub id usable when HF_HUB_OFFLINE is set (cached).

Run before anything heavy is imported, so a wrong --model_name_or_path is a one-line usage
error, not a download attempt or a traceback. HUB_ID is also what train.data takes for a
data set's hub name.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from train.cli import UsageError

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes", "on")


def _hub_cached(repo_id: str, filename: str, repo_type: str = "model") -> bool:
    try:
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(repo_id, filename, repo_type=repo_type)
    except Exception:
        return False
    return isinstance(found, str)


def check_model_path(name: str | None, flag: str = "--model_name_or_path") -> None:
    """A local model dir must exist; a hub id must be reachable or cached when offline."""
    if not name:
        raise UsageError(f"{flag} is required")
    path = Path(name).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise UsageError(f"model path has no config.json: {name}")
        return
    if not HUB_ID.match(name):
        raise UsageError(f"model path not found: {name}")
    if _offline() and not _hub_cached(name, "config.json"):
        raise UsageError(f"model path not found: {name} (no such directory; HF_HUB_OFFLINE is set)")
