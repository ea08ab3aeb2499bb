"""mkdocs hook: the site works opened from the file system (build/site/index.html), not only served.

Links name files (mkdocs.yml: use_directory_urls: false). Search: opened from a file: URL, material
reads its index from search/search_index.js (a script, where a served site fetches the .json), which
this writes after the build, as material's offline plugin does; that plugin is not used because it
adds a script from unpkg.com to every page. The search worker runs in a frame instead
(assets/file-worker.js, loaded before material's bundle as a polyfill)."""

from __future__ import annotations

from pathlib import Path


def on_post_build(config):
    index = Path(config.site_dir) / "search" / "search_index.json"
    if index.is_file():
        data = index.read_text(encoding="utf-8")
        index.with_name("search_index.js").write_text(f"var __index = {data}", encoding="utf-8")
