"""--offline --hf-home DIR: what the login node fetches lands where the ranks will look (DIR/hub)."""
import os
from pathlib import Path

import huggingface_hub
import huggingface_hub.constants

from slurmgen.site import prefetch
from slurmgen.plan.spec import JobSpec


def fake_snapshot_download(fetched):
    """Stands in for the network part of snapshot_download, keeping its cache rule: an explicit
    cache_dir, else the cache path huggingface_hub fixed when it was imported (HF_HOME set later
    is not read again)."""

    def download(repo_id, repo_type=None, cache_dir=None, **_):
        root = Path(cache_dir or huggingface_hub.constants.HF_HUB_CACHE)
        folder = root / f"{repo_type}s--{repo_id.replace('/', '--')}" / "snapshots" / "abc"
        folder.mkdir(parents=True)
        (folder / "config.json").write_text("{}")
        fetched.append(folder)
        return str(folder)

    return download


def test_offline_fetch_lands_under_hf_home(tmp_path, monkeypatch):
    default_cache = tmp_path / "default-cache"
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(default_cache))  # fixed at import
    fetched = []
    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_snapshot_download(fetched))
    shared = tmp_path / "shared hf"
    spec = JobSpec(gpus=(1,), hf_home=str(shared), offline=True,
                   train_args=("--model_name_or_path", "org/tiny-model", "--dataset_name", "org/tiny-data"))
    lines = []
    prefetch.prefetch(spec, log=lines.append)
    # Where HF_HOME=DIR makes the ranks look: DIR/hub (huggingface_hub's HF_HUB_CACHE default).
    assert [p.relative_to(shared / "hub").parts[0] for p in fetched] == ["models--org--tiny-model",
                                                                          "datasets--org--tiny-data"]
    assert not default_cache.exists()
    assert lines == [f"fetching model org/tiny-model into {shared / 'hub'}",
                     f"fetching dataset org/tiny-data into {shared / 'hub'}"]
    assert "HF_HOME" not in os.environ or os.environ["HF_HOME"] != str(shared)
