"""The README and the docs site (docs/mkdocs.yml, pages under docs/pages/).

- The site builds with `mkdocs build --strict` (offline: material's own search only), its CLI
  reference is generated from the click commands and holds every job option.
- The README stays short and shows the first screen of the golden 1,1,2,2 script as slurmgen
  writes it; the docs include the whole script from the golden file.
- No page reads like a development log.
- Every command shown in a `console` block (`$ ` lines) or a `shell` block runs here with the
  expected exit status (an error line shown after it must be what it prints), unless it is listed
  in NOT_RUN with the reason; the listed ones must be exactly those skipped, so a new command
  cannot go untested without being listed.
"""
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from html import unescape
from pathlib import Path
from typing import Optional

import click
import pytest

from slurmgen.options import ENTRIES
from slurmgen.plan.option_fields import SECTIONS
from tests.conftest import TIMEOUT_SCALE

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = ROOT / "docs" / "pages"
GOLDEN = ROOT / "tests" / "golden" / "uneven_1_1_2_2.sh"
SEED_SCRIPT = ROOT / "tests" / "data" / "seed000" / "train.py"
LLAMA_70B = ROOT / "tests" / "data" / "llama-2-70b" / "config.json"
README_MAX_LINES = 250

# Commands the pages show that this test does not run, with the reason. Everything else shown in
# a console or shell block must be a slurmgen command that runs without a cluster.
CLUSTER = "needs a Slurm cluster"
SUBMITS = "submits a job (needs a Slurm cluster)"
TRAINS = "trains a model (the tests/test_train_*.py tests run the entry points)"
INSTALLS = "installs packages or builds a venv"
NOT_RUN = {
    # README and getting started
    "make demo": "starts a cluster and submits a job (tests/demo.sh)",
    "make test": "the whole suite, with a cluster",
    "pip install .": INSTALLS,
    "pip install .[train]": INSTALLS,
    "pip install .[report]": INSTALLS,
    "sbatch generated.sh": SUBMITS,
    "sbatch job.sh": SUBMITS,
    "slurmgen check --nodes 4 --gpus 1,1,2,2 --partition gpu -- --model_name_or_path Qwen/Qwen2.5-0.5B "
    "--dataset_name trl-lib/Capybara": CLUSTER,
    "slurmgen watch 1234 --output-dir runs/first": CLUSTER,
    "slurmgen submit --nodes 4 --gpus 1,1,2,2 -- --model_name_or_path Qwen/Qwen2.5-0.5B --dataset_name "
    "trl-lib/Capybara --output_dir runs/first": SUBMITS,
    "slurmgen submit --nodes 4 --gpus 1,1,2,2 -- --model_name_or_path lm --dataset_name data.jsonl --output_dir run": SUBMITS,
    # uneven clusters
    "slurmgen render --gpus auto --world-size 6": CLUSTER + " (--gpus auto reads the free GPUs)",
    "slurmgen render --gpus auto --max-gpus 16 --min-gpus 4": CLUSTER + " (--gpus auto reads the free GPUs)",
    "slurmgen check --gpus auto --world-size 5 -- --model_name_or_path Qwen/Qwen2.5-0.5B --dataset_name "
    "trl-lib/Capybara": CLUSTER,
    # sweeps
    "sbatch sweep.sh": SUBMITS,
    "bash het-sweep-submit.sh": SUBMITS,
    "bash prep-submit.sh": SUBMITS,
    # submit from Python
    "slurmgen submit --nodes 4 --gpus 1,1,2,2 -- --model_name_or_path lm --dataset_name data.jsonl "
    "--output_dir runs/sft": SUBMITS,
    "python -m slurmgen.submit --nodes 4 --gpus 1,1,2,2 -- --model_name_or_path lm --dataset_name data.jsonl "
    "--output_dir runs/sft": SUBMITS,
    "slurmgen submit --detach --nodes 4 --gpus 1,1,2,2 -- --model_name_or_path lm --dataset_name data.jsonl --output_dir runs/sft": SUBMITS,
    "slurmgen submit --attach 1234 --folder logs/submitit": CLUSTER,
    # after submission (status, logs, cancel, list)
    "slurmgen status 1234": CLUSTER,
    "slurmgen status 1234 --json": CLUSTER,
    "slurmgen logs 1234 --rank 3 --follow": CLUSTER,
    "slurmgen cancel 1234": CLUSTER,
    "slurmgen list": CLUSTER,
    "slurmgen submit --local --gpus 2 -- --model_name_or_path lm --dataset_name data.jsonl "
    "--output_dir runs/local": TRAINS,
    # training entry points
    "python -m train.tiny .tiny": TRAINS,
    "python -m train.sft --model_name_or_path .tiny/lm --dataset_name .tiny/data/text.jsonl --output_dir runs/sft "
    "--max_steps 10 --save_steps 5 --per_device_train_batch_size 4 --logging_steps 1 --learning_rate 3e-3 "
    "--report_to none": TRAINS,
    "python -m train.sft --model_name_or_path .tiny/lm --dataset_name .tiny/data/chat.jsonl --output_dir runs/chat "
    "--max_steps 10 --per_device_train_batch_size 4 --logging_steps 1 --learning_rate 3e-3 --use_peft "
    "--lora_target_modules q_proj v_proj": TRAINS,
    "python -m train.classify --model_name_or_path .tiny/bert --train_file .tiny/data/labelled_train.jsonl "
    "--eval_file .tiny/data/labelled_eval.jsonl --output_dir runs/classify --max_steps 60 "
    "--per_device_train_batch_size 16 --learning_rate 3e-3 --logging_steps 5 --report_to none": TRAINS,
    "python -m train.ddp_loop --model_name_or_path .tiny/lm --dataset .tiny/data/text.jsonl --output_dir runs/ddp "
    "--max_steps 10 --save_steps 5 --batch_size 8 --lr 3e-3": TRAINS,
    "torchrun --nproc-per-node 2 -m train.sft --model_name_or_path .tiny/lm --dataset_name .tiny/data/text.jsonl "
    "--output_dir runs/sft2 --max_steps 10 --per_device_train_batch_size 4 --learning_rate 3e-3 "
    "--report_to none": TRAINS,
    # testing and the local cluster
    "make test SLURM=25.11": "the whole suite on a Slurm it builds",
    "make test SPLIT=1": "the whole suite, with a cluster",
    "make unit": "the unit suite, which holds this test",
    "make docs": "builds the site, as test_the_site_builds_strictly does",
    "tests/localcluster.sh install": "installs Debian's Slurm (root)",
    "tests/localcluster.sh up": "starts the local cluster (root)",
    "tests/localcluster.sh status": CLUSTER,
    "tests/localcluster.sh down": "stops the local cluster (root)",
    "export SLURMGEN_CLUSTER_DIR=/tmp/slurmgen-cluster-2 SLURMGEN_CLUSTER_NET=10.213.48 SLURMGEN_CLUSTER_PORT=16917 "
    "SLURMGEN_CLUSTER_PREFIX=sgd SLURMGEN_CLUSTER_FIRST_JOB=1000001 SLURM_CONF=/tmp/slurmgen-cluster-2/etc/slurm.conf":
        "the second cluster's environment (tests/cluster_lifecycle.sh starts one)",
    "tests/localcluster.sh up --slurm 25.11": "starts a local cluster on a Slurm it builds (root)",
}

# Development-log wording: pages are reference for a user today. Checked in prose only (code
# blocks and code spans are the tool's own text, which may quote other projects' history).
DEV_LOG = [
    r"\bit used to\b", r"\bused to be\b", r"\bno longer\b", r"\bsessions? \d+", r"\bissue #?\d+",
    r"\bturn \d+", r"\b(?:work )?period \d+", r"\bis now\b", r"\bare now\b", r"\bnow (?:is|are|does|do|uses|works|has"
    r"|takes|gives|fails|writes|reads|checks|runs|supports|shows)\b", r"\bpreviously\b", r"\bnot yet\b",
    r"\bno \w+ was lent\b", r"\bearlier sessions?\b", r"\b(?:was|were) fixed\b", r"\bfixed in\b",
    r"\bthis (?:session|turn|issue)\b", r"\bnewly\b", r"\bfrom now on\b",
]


def doc_files() -> list[Path]:
    return [README, *sorted(PAGES.rglob("*.md"))]


def fenced_blocks(text: str) -> list[tuple[str, list[str]]]:
    """(language, lines) of each ``` block, indented ones (in list items) included."""
    blocks, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        opened = re.match(r"^(\s*)```(\S*)", lines[i])
        if not opened:
            i += 1
            continue
        indent, lang, body = opened.group(1), opened.group(2), []
        i += 1
        while i < len(lines) and not re.match(rf"^{re.escape(indent)}```\s*$", lines[i]):
            body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i].lstrip())
            i += 1
        blocks.append((lang, body))
        i += 1
    return blocks


def prose(text: str) -> str:
    """The text without fenced blocks, code spans and mkdocs-click directives."""
    text = re.sub(r"^(\s*)```.*?^\1```\s*$", "", text, flags=re.M | re.S)
    text = re.sub(r"(`+).+?\1", "", text, flags=re.S)
    return re.sub(r"^::: .*(\n    .*)*", "", text, flags=re.M)


@dataclass
class Shown:
    page: str
    tokens: list
    error_line: Optional[str]  # a `slurmgen: error:` line shown after it

    @property
    def key(self) -> str:
        return " ".join(self.tokens)


def _joined(lines: list[str]) -> list[str]:
    out = []
    for line in lines:
        if out and out[-1].endswith("\\"):
            out[-1] = out[-1][:-1] + " " + line.strip()
        else:
            out.append(line)
    return out


def _segments(page: str, command: str, error_line: Optional[str]) -> list[Shown]:
    tokens, shown, current = shlex.split(command, comments=True), [], []
    for token in [*tokens, "&&"]:
        if token == "&&":
            if current:
                shown.append(Shown(page, current, error_line))
            current = []
        else:
            current.append(token)
    return shown


def shown_commands() -> tuple[list[Shown], list[str]]:
    """Every command in a console or shell block; and lines that look like commands elsewhere."""
    commands, misplaced = [], []
    for path in doc_files():
        page = str(path.relative_to(ROOT))
        for lang, body in fenced_blocks(path.read_text()):
            if lang == "console":
                lines = _joined(body)
                for i, line in enumerate(lines):
                    if not line.startswith("$ "):
                        continue
                    output = []
                    for later in lines[i + 1:]:
                        if later.startswith("$ "):
                            break
                        output.append(later)
                    error = next((o for o in output if o.startswith("slurmgen: error:")), None)
                    commands += _segments(page, line[2:], error)
            elif lang == "shell":
                for line in _joined(body):
                    if line.strip() and not line.lstrip().startswith("#"):
                        commands += _segments(page, line, None)
            else:
                misplaced += [f"{page}: {line}" for line in body
                              if re.match(r"\s*(\$ |slurmgen(?: (?:render|check|fit|watch|report|submit)\b| -|$)"
                                          r"|python3? -m slurmgen\.submit)", line)]
    return commands, misplaced


# ---------------------------------------------------------------------------- the site
def test_the_site_builds_strictly(site):
    assert (site / "index.html").is_file()
    for page in PAGES.rglob("*.md"):
        rel = page.relative_to(PAGES).with_suffix("")
        built = site / rel.with_suffix(".html")  # use_directory_urls: false (tests/test_docs_site.py)
        assert built.is_file(), f"{page} was not built"


def test_the_docs_include_the_golden_script_whole(site):
    sources = [p.read_text() for p in PAGES.rglob("*.md")]
    assert any('--8<-- "tests/golden/uneven_1_1_2_2.sh"' in s for s in sources)
    golden = GOLDEN.read_text()
    head = "\n".join(golden.splitlines()[:3])
    assert not any(head in s for s in sources), "paste no generated script into a page: include the golden file"
    page = unescape(re.sub(r"<[^>]+>", "", (site / "guides" / "uneven-cluster.html").read_text()))
    assert all(line in page for line in golden.splitlines() if line.strip())


def test_the_cli_reference_is_generated_for_every_command(site):
    """One mkdocs-click directive for the `slurmgen` group, which documents every command in it
    (so a new command is documented without a line here), each with its usage and options."""
    from slurmgen.cli import cli, every_command

    text = (PAGES / "reference" / "cli.md").read_text()
    directives = [dict(re.findall(r"^    :(\w+): (.*)$", d, flags=re.M))
                  for d in re.findall(r"^::: mkdocs-click\n((?:    .*\n?)+)", text, flags=re.M)]
    assert [(d["module"], d["command"], d["prog_name"]) for d in directives] == [("slurmgen.cli", "cli", "slurmgen")]
    html = (site / "reference" / "cli.html").read_text()
    assert "submit" in every_command()
    for name, command in every_command().items():
        assert f'id="slurmgen-{name}"' in html, f"no section for slurmgen {name}"
        assert f"slurmgen {name} [OPTIONS]" in unescape(html), f"no usage for slurmgen {name}"
        options = [p.opts[0] for p in command.params if isinstance(p, click.Option)]
        missing = [o for o in options if o not in unescape(html)]
        assert missing == [], f"slurmgen {name}: not in the reference"


def test_the_cli_reference_shows_every_job_option(site):
    html = unescape((site / "reference" / "cli.html").read_text())
    names = [name for e in ENTRIES for name in e.option.flags[0].split("/")]
    missing = [name for name in names if not re.search(rf"{re.escape(name)}\b", html)]
    assert missing == []


def test_the_cli_reference_keeps_the_sections_of_help(site):
    """render's options in --help's sections, in order, each option in its own (docs/hooks/cli_sections.py)."""
    html = unescape((site / "reference" / "cli.html").read_text())
    render = html[html.index('id="slurmgen-render"'):html.index('id="slurmgen-report"')]
    titles = re.findall(r"<strong>([\w ]+):</strong>", render)
    assert titles == ["Usage", "Script", *SECTIONS, "Other options"]
    blocks = dict(zip(titles, re.split(r"<strong>[\w ]+:</strong>", render)[1:]))
    for entry in ENTRIES:
        assert re.search(rf"{re.escape(entry.option.flags[0].split('/')[0])}\b", blocks[entry.option.section]), entry


# ---------------------------------------------------------------------------- the README
def test_the_readme_is_short():
    assert len(README.read_text().splitlines()) <= README_MAX_LINES


def test_the_readme_shows_the_first_screen_of_the_golden_script():
    excerpt = next(body for lang, body in fenced_blocks(README.read_text())
                   if lang == "bash" and body[:1] == ["#!/bin/bash"])
    golden = GOLDEN.read_text().splitlines()
    assert excerpt == golden[:len(excerpt)], "the README's script excerpt differs from tests/golden"
    header = golden.index("")  # the comments and every #SBATCH line come before the first blank line
    assert len(excerpt) >= header and 20 <= len(excerpt) <= 60


def test_the_readme_links_to_pages_that_exist():
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README.read_text())
    assert links and [link for link in links if "://" not in link and not (ROOT / link).is_file()] == []


def test_no_development_log_wording():
    found = [f"{path.relative_to(ROOT)}: {m.group(0)!r}" for path in doc_files()
             for pattern in DEV_LOG for m in re.finditer(pattern, prose(path.read_text()), flags=re.I)]
    assert found == []


# ---------------------------------------------------------------------------- the commands
def test_commands_sit_in_console_or_shell_blocks():
    _, misplaced = shown_commands()
    assert misplaced == []


def test_not_run_lists_exactly_the_commands_skipped():
    commands, _ = shown_commands()
    shown = {c.key for c in commands}
    assert sorted(set(NOT_RUN) - shown) == [], "listed in NOT_RUN but no page shows it"
    others = sorted({c.key for c in commands if c.key not in NOT_RUN and not _argv(c.tokens)})
    assert others == [], "not a slurmgen command: run it here, or list it in NOT_RUN with the reason"


def _argv(tokens: list) -> Optional[list]:
    if tokens[0] == "slurmgen":
        return [sys.executable, "-m", "slurmgen", *tokens[1:]]
    if tokens[:3] == ["python", "-m", "slurmgen.submit"]:
        return [sys.executable, "-m", "slurmgen.submit", *tokens[3:]]
    return None


def _fake_hub(home: Path) -> None:
    """A Hugging Face cache holding the config of meta-llama/Llama-2-70b-hf (fit reads nothing else)."""
    repo = home / "hub" / "models--meta-llama--Llama-2-70b-hf"
    revision = "0" * 40
    (repo / "snapshots" / revision).mkdir(parents=True)
    shutil.copy(LLAMA_70B, repo / "snapshots" / revision / "config.json")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(revision)


def _guards(bin_dir: Path) -> None:
    """Slurm's commands fail here (a command that reaches the cluster must be in NOT_RUN), but
    `sbatch --version`, which render asks for the release, answers as the installed one does."""
    bin_dir.mkdir()
    real = shutil.which("sbatch")
    for name in ("sbatch", "srun", "scancel", "scontrol", "sinfo", "squeue", "sacct"):
        version = f'[ "$1" = --version ] && exec {shlex.quote(real)} --version\n' if name == "sbatch" and real else ""
        (bin_dir / name).write_text(f"#!/bin/sh\n{version}echo 'docs test: {name} does not run here' >&2\nexit 97\n")
        (bin_dir / name).chmod(0o755)


def _runs(parent: Path) -> None:
    """Two finished runs of a sweep, as train/outputs.py writes them."""
    import json

    for i, (lr, losses) in enumerate((("3e-3", [6.5, 5.9, 5.4]), ("3e-2", [6.5, 6.1, 5.8]))):
        run = parent / f"learning_rate-{lr}"
        run.mkdir(parents=True)
        lines = [json.dumps({"step": 10 * (s + 1), "max_steps": 30, "loss": loss, "samples_per_second": 50.0 + i,
                             "time": 1700000000.0 + s}) for s, loss in enumerate(losses)]
        (run / "progress.jsonl").write_text("\n".join(lines) + "\n")
        (run / "sweep.json").write_text(json.dumps({"learning_rate": lr}))
        (run / "metrics.json").write_text(json.dumps({
            "world_size": 1, "global_step": 30, "train_loss": sum(losses) / 3, "first_loss": losses[0],
            "last_loss": losses[-1], "samples_per_second": 50.0, "tokens_per_second": 4000.0,
            "train_runtime": 10.0, "resumed_from_step": None, "ranks_per_host": {"node1": 1},
            "local_world_sizes": [1], "peak_rss_mb_per_rank": [900.0]}))


def _workdir(base: Path, shown: Shown, index: int) -> Path:
    """A fresh directory for one command, with the files it names: --script files (train.py is a
    real seed script), report's run directories, and the TOML files the page shows (_toml_files)."""
    cwd = base / f"cmd{index}"
    cwd.mkdir()
    tokens = shown.tokens
    for flag, value in zip(tokens, tokens[1:]):
        if flag == "--script":
            target = cwd / value
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(SEED_SCRIPT.read_text() if target.name == "train.py" else "")
    if tokens[1:2] == ["report"]:
        for arg in tokens[2:]:
            if not arg.startswith("-"):
                _runs(cwd / arg)
    for name, text in _toml_files(shown.page).items():
        (cwd / name).write_text(text)
        (cwd / name).chmod(stat.S_IRUSR | stat.S_IWUSR | stat.S_IRGRP | stat.S_IROTH)
    return cwd


def _toml_files(page: str) -> dict:
    """The page's TOML files: each toml block whose first line names it, e.g. `# slurmgen.toml` (a
    profile) or `# job.toml` (a job file)."""
    found = {}
    for lang, body in fenced_blocks((ROOT / page).read_text()):
        if lang == "toml" and body and re.fullmatch(r"# [\w.-]+\.toml", body[0]):
            found[body[0][2:]] = "\n".join(body) + "\n"
    return found


def test_every_command_shown_runs(tmp_path):
    commands, _ = shown_commands()
    distinct = {}  # a command shown twice runs once (per page when the page has its own TOML files)
    for c in commands:
        if c.key not in NOT_RUN and _argv(c.tokens):
            distinct.setdefault((c.key, c.page if _toml_files(c.page) else None), c)
    runnable = list(distinct.values())
    assert len(runnable) >= 20, "the pages show fewer commands than expected: is the parser broken?"
    home = tmp_path / "home"
    _fake_hub(home / "hf")
    _guards(tmp_path / "guards")
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "SLURMGEN_PROFILE")}
    env.update(PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]), HOME=str(home),
               XDG_CONFIG_HOME=str(home / ".config"), HF_HOME=str(home / "hf"), HF_HUB_OFFLINE="1",
               HF_DATASETS_OFFLINE="1", PATH=f"{tmp_path / 'guards'}{os.pathsep}{os.environ['PATH']}")

    def run(item):
        index, shown = item
        cwd = _workdir(tmp_path, shown, index)
        done = subprocess.run(_argv(shown.tokens), cwd=cwd, capture_output=True, text=True, env=env,
                              timeout=120 * TIMEOUT_SCALE, stdin=subprocess.DEVNULL)  # 8 at once, at nice 10 in CI
        expected = 2 if shown.error_line else 0
        problems = []
        if done.returncode != expected:
            problems.append(f"exit {done.returncode}, expected {expected}")
        if shown.error_line and shown.error_line not in done.stderr.splitlines():
            problems.append(f"the page shows {shown.error_line!r}")
        if problems:
            return f"{shown.page}: {shown.key}: {'; '.join(problems)}\n{done.stdout[-800:]}{done.stderr[-800:]}"
        return None

    with ThreadPoolExecutor(max_workers=min(8, (os.cpu_count() or 2) * 2)) as pool:
        failures = [f for f in pool.map(run, enumerate(runnable)) if f]
    assert failures == [], "\n\n".join(failures)
