"""--offline: fetch the hub model and data set named in the training arguments once, here on the
login node, into the shared cache (--hf-home) that every compute node then reads offline."""

from __future__ import annotations

import os
import re
from typing import Optional

from slurmgen.plan.spec import JobSpec
from slurmgen.plan.words import train_arg

# Training arguments that name hub repositories, with the repository type they name.
HUB_ARGUMENTS = {"--model_name_or_path": "model", "--dataset_name": "dataset"}


class PrefetchError(RuntimeError):
    pass


# A hub id is NAME or OWNER/NAME; anything else (./x, /x, ~/x, a/b/c) is meant as a local path.
_HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*(/[A-Za-z0-9][A-Za-z0-9_.-]*)?\Z")


def hub_names(train_args) -> list[tuple[str, str]]:
    """(repo type, repo id) for hub names in the arguments; existing local paths need no fetching,
    and a missing local path is an error rather than something to look for on the hub."""
    found = []
    for key, repo_type in HUB_ARGUMENTS.items():
        value = train_arg(train_args, key)
        if not value or os.path.exists(value):
            continue
        if not _HUB_ID.match(value):
            raise PrefetchError(f"{key} {value!r}: no such local path, and not a hub name (OWNER/NAME)")
        found.append((repo_type, value))
    return found


def prefetch(spec: JobSpec, log=print) -> None:
    names = hub_names(spec.train_args)
    if not names:
        return
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise PrefetchError("--offline needs huggingface_hub on this node to fetch "
                            f"{names[0][1]!r} (pip install huggingface_hub)") from None
    cache: Optional[str] = spec.hf_home
    # huggingface_hub fixes its cache path when it is imported, so HF_HOME set now would be
    # ignored: the directory is passed explicitly, where the ranks' HF_HOME=DIR will look (DIR/hub).
    cache_dir = os.path.join(cache, "hub") if cache else None
    for repo_type, repo_id in names:
        log(f"fetching {repo_type} {repo_id} into {cache_dir or 'the default Hugging Face cache'}")
        try:
            snapshot_download(repo_id=repo_id, repo_type=repo_type, cache_dir=cache_dir)
        except Exception as err:  # network, auth, missing repo: one line for the user
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise PrefetchError(f"--offline: cannot fetch {repo_type} {repo_id!r}: {first}") from None
