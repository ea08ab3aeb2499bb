"""The built docs site works opened from the file system (build/site/index.html, as the README says)
and served; its CLI reference shows each command as `--help` does.

- Every link and resource of every page names a file of the site (a folder link would show a
  directory listing from the file system), and a link's #anchor exists on the page it names.
- The pages load nothing from outside the site.
- In Chromium: search answers from a file: URL; the how-to's 110-column generated script needs no
  horizontal scrolling at 1400 px, nor any code block at 420 px.
- The CLI reference: each command's option sections and options are those of its `--help`.
"""
import os
import re
import shutil
import subprocess
from html import unescape
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from click.testing import CliRunner

from tests.conftest import skip_or_fail

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parent.parent


class Refs(HTMLParser):
    """The page's ids, its links (a href) and the resources it loads (src, link href)."""

    def __init__(self):
        super().__init__()
        self.ids, self.links, self.loads = set(), [], []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if a.get("id"):
            self.ids.add(a["id"])
        if tag == "a" and a.get("href") is not None:
            self.links.append(a["href"])
        elif tag == "link" and a.get("href"):
            self.loads.append(a["href"])
        elif a.get("src"):
            self.loads.append(a["src"])


def parsed(page: Path) -> Refs:
    refs = Refs()
    refs.feed(page.read_text(encoding="utf-8"))
    return refs


def pages(site: Path) -> list[Path]:
    return sorted(site.rglob("*.html"))


def test_every_link_names_a_file_of_the_site(site):
    """Each page's links and resources, resolved from its own folder as a browser does from a file:
    URL, are files (a link to guides/x/ would show a folder there), and each #anchor exists. Not
    404.html: a server shows it for any missing path, so its links start at the site's root."""
    assert (site / "index.html").is_file() and (site / "guides" / "uneven-cluster.html").is_file()
    ids = {page: parsed(page).ids for page in pages(site)}
    broken, checked = [], 0
    for page in pages(site):
        if page == site / "404.html":
            continue
        refs = parsed(page)
        for url in refs.links + refs.loads:
            parts = urlsplit(url)
            if parts.scheme or parts.netloc or url.startswith(("data:", "mailto:")):
                continue
            target = (page.parent / unquote(parts.path)).resolve() if parts.path else page
            checked += 1
            if not target.is_file():
                broken.append(f"{page.relative_to(site)}: {url} ({'a folder' if target.is_dir() else 'missing'})")
            elif parts.fragment and parts.path and target.suffix == ".html" and parts.fragment not in ids[target]:
                broken.append(f"{page.relative_to(site)}: {url} (no such anchor)")
    assert checked > 500, "fewer links than expected: is the parser broken?"
    assert broken == []


def test_the_pages_load_nothing_from_outside(site):
    outside = [f"{page.relative_to(site)}: {url}" for page in pages(site) for url in parsed(page).loads
               if urlsplit(url).scheme in ("http", "https") or url.startswith("//")]
    assert outside == []


# ---------------------------------------------------------------------------- in a browser
def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if not found:
        skip_or_fail("no chromium on PATH (apt-get install chromium; .ci/run installs it)")
    return found


def dom(browser: str, url: str, width: int, home: Path) -> str:
    done = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", f"--window-size={width},1000",
                           "--virtual-time-budget=5000", "--dump-dom", url], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "HOME": str(home)}, check=True)
    return done.stdout


def test_search_answers_from_the_file_system(site, tmp_path):
    """Opened as a file (no server), material's search still finds pages: its index is read from
    search/search_index.js and its worker runs in a frame (assets/file-worker.js)."""
    url = (site / "guides" / "sweeps.html").as_uri() + "?q=rendezvous"
    text = dom(chromium(), url, 1400, tmp_path)
    found = re.search(r'class="md-search-result__meta">([^<]*)<', text)
    assert found and re.fullmatch(r"\d+ matching documents?", found.group(1)), found and found.group(1)
    assert re.search(r'href="file:[^"]*/guides/uneven-cluster\.html[^"]*" class="md-search-result__link"', text)


PROBE = """<script>addEventListener('load', () => {
  const out = [...document.querySelectorAll('.md-content pre > code')].map((code, i) => {
    const lines = [...code.querySelectorAll('span[id^="__span-"]')];
    const height = parseFloat(getComputedStyle(code).lineHeight);
    const wrapped = lines.filter(s => s.getBoundingClientRect().height > 1.5 * height)
                         .map(s => s.textContent.replace(/\\n$/, '').length);
    return `${i} ${code.scrollWidth - code.clientWidth} ${wrapped.join(',') || '-'}`;
  });
  const pre = document.createElement('pre'); pre.id = 'probe'; pre.textContent = out.join('\\n');
  document.body.append(pre);
});</script></body>"""


def code_blocks(browser: str, page: Path, width: int, home: Path) -> list[tuple[int, int, list[int]]]:
    """Each code block of the page at this width: (index, how far it would scroll sideways, the
    lengths of the lines that wrap). A copy of the page, beside it, carries the probe."""
    probe = page.with_name(f"probe-{width}-{page.name}")
    probe.write_text(page.read_text(encoding="utf-8").replace("</body>", PROBE), encoding="utf-8")
    try:
        text = dom(browser, probe.as_uri(), width, home)
    finally:
        probe.unlink()
    body = unescape(re.search(r'<pre id="probe">([^<]*)</pre>', text).group(1))
    rows = [line.split() for line in body.splitlines()]
    return [(int(i), int(over), [] if wrapped == "-" else [int(n) for n in wrapped.split(",")])
            for i, over, wrapped in rows]


@pytest.mark.parametrize("width", [1400, 420])
def test_code_blocks_need_no_sideways_scrolling(site, tmp_path, width):
    """The how-to's generated script (lines up to 110 columns, a few longer) at 1400 px: no block
    scrolls sideways and no line of 110 columns or fewer wraps. At 420 px, lines wrap (with a
    hanging indent, docs/pages/assets/extra.css) and still nothing scrolls."""
    browser = chromium()
    for page, least in ((site / "guides" / "uneven-cluster.html", 5), (site / "index.html", 1)):
        blocks = code_blocks(browser, page, width, tmp_path)
        assert len(blocks) >= least, page.name
        assert [(i, over) for i, over, _ in blocks if over > 0] == [], f"{page.name} scrolls sideways at {width} px"
        if width == 1400:
            assert [(i, n) for i, _, wrapped in blocks for n in wrapped if n <= 110] == [], page.name


# ---------------------------------------------------------------------------- the CLI reference
def help_sections(name: str) -> tuple[list[str], set[str]]:
    """The section titles of `slurmgen NAME --help` (Usage first) and the options it lists."""
    from slurmgen.cli import cli, every_command

    result = CliRunner().invoke(cli, [name, "--help"], prog_name="slurmgen", terminal_width=80)
    assert result.exit_code == 0, result.output
    text = result.output
    titles = ["Usage", *re.findall(r"^(\S[^\n]*):$", text, flags=re.M)]
    return titles, set(re.findall(r"^ {2}(?:-\w, )?(--[\w-]+)", text, flags=re.M))


def reference_sections(site: Path, name: str) -> tuple[list[str], set[str]]:
    """The same, from the command's part of the built CLI reference."""
    html = unescape((site / "reference" / "cli.html").read_text(encoding="utf-8"))
    start = html.index(f'id="slurmgen-{name}"')
    following = re.search(r'id="slurmgen-\w+"', html[start + 10:])
    part = html[start:start + 10 + following.start()] if following else html[start:]
    titles = re.findall(r"<strong>([\w ]+):</strong>", part)
    blocks = re.findall(r"<pre[^>]*>(.*?)</pre>", part, flags=re.S)
    text = "\n".join(re.sub(r"<[^>]+>", "", b) for b in blocks)
    return titles, set(re.findall(r"^ {2}(?:-\w, )?(--[\w-]+)", text, flags=re.M))


def test_each_commands_reference_is_its_help(site):
    """Each command's reference keeps the option sections `--help` shows, in order, and lists
    exactly the options that command takes: none of another command's."""
    from slurmgen.cli import cli, every_command

    assert len(every_command()) >= 6
    for name in every_command():
        help_titles, help_options = help_sections(name)
        ref_titles, ref_options = reference_sections(site, name)
        assert ref_titles == help_titles, name
        assert "--help" in help_options and ref_options == help_options, (  # cancel: --help alone
            f"slurmgen {name}: only in the reference {sorted(ref_options - help_options)}, "
            f"only in --help {sorted(help_options - ref_options)}")
