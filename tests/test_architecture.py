"""The package's shape, checked: folders by where code runs, every arrow pointing down (the plan asks
nothing of the site: what it needs is handed in), no import circles (counting imports inside functions
and imports for types only), no module over 350 lines, and each file saying its concern first."""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "slurmgen"
MAX_LINES = 350
# Where code runs: what each folder may import from slurmgen (the commands at the top import all).
MAY_IMPORT = {
    # contract: the names the ranks' side defines (train/contract.py), for everything;
    # runtime_spec: the record a rendered script hands the job runtime (plan writes it, job reads it);
    # frozen_records: how a login-node command's records are declared (imports nothing of slurmgen's)
    "plan": {"plan", "runtime_spec", "contract", "frozen_records"},  # pure: what it needs of the site is handed in
    "script": {"plan", "script", "runtime_spec"},
    "site": {"plan", "site", "frozen_records"},
    "job": {"job", "site", "contract", "runtime_spec"},
    # writing: the command's log directory, made and undone as render's is; snapshot: the code snapshot,
    # taken as render takes it
    "submit": {"submit", "plan", "site", "job", "observe", "options", "errors", "writing", "snapshot", "contract",
               "runtime_spec"},
    "observe": {"observe", "site", "job"},  # job: where a job's folder is
}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, types_too: bool = False) -> set[str]:
    """Every slurmgen module this file imports, at module level or inside a function (and under `if
    TYPE_CHECKING:` with types_too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("slurmgen"):
            for alias in node.names:  # `from slurmgen.plan import spec` names a module
                child = f"{node.module}.{alias.name}"
                found.add(child if (PACKAGE.parent / (child.replace(".", "/") + ".py")).exists() else node.module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("slurmgen")}
    if not types_too and isinstance(node := ast.parse(path.read_text()), ast.Module):  # types only
        for stmt in node.body:
            if isinstance(stmt, ast.If) and getattr(stmt.test, "id", "") == "TYPE_CHECKING":
                found -= {n.module for n in ast.walk(stmt) if isinstance(n, ast.ImportFrom)}
    return found - {module_name(path)}


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
GRAPH = {name: {m for m in imports_of(path) if m in MODULES} for name, path in MODULES.items()}
# An import for types only is an import all the same: a circle through one is still a circle.
WITH_TYPES = {name: {m for m in imports_of(path, types_too=True) if m in MODULES} for name, path in MODULES.items()}


def test_no_import_circles():
    seen, stack, cycles = set(), [], []

    def visit(name):
        if name in stack:
            cycles.append(stack[stack.index(name):] + [name])
            return
        if name in seen:
            return
        seen.add(name)
        stack.append(name)
        for child in sorted(WITH_TYPES[name] - {n for n in GRAPH if n.count(".") < name.count(".") and name.startswith(n + ".")}):
            visit(child)
        stack.pop()

    for name in sorted(GRAPH):
        visit(name)
    assert cycles == []


@pytest.mark.parametrize("folder", sorted(MAY_IMPORT))
def test_each_folder_imports_only_downward(folder):
    wrong = sorted((name, target) for name, targets in GRAPH.items() if name.startswith(f"slurmgen.{folder}.")
                   for target in targets if (target.split(".") + ["__init__"])[1] not in MAY_IMPORT[folder] | {"__init__"})
    assert wrong == []


def test_no_module_is_over_350_lines_and_each_says_its_concern_first():
    long = {name: n for name, path in MODULES.items() if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert long == {}
    silent = [name for name, path in MODULES.items()
              if not name.endswith("__main__") and not (ast.get_docstring(ast.parse(path.read_text())) or "").strip()]
    assert silent == []


def test_the_folders_are_the_architecture():
    folders = sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists())
    assert folders == ["job", "observe", "plan", "script", "site", "submit"]


def test_templates_read_the_plan_alone():
    """Templates stay dumb: they loop over the plan and print its facts (plan.facts), never the spec,
    so what a script says is decided in Python, where it is tested."""
    templates = sorted((ROOT / "templates").glob("*.j2"))
    assert templates
    reads_spec = {t.name for t in templates if "spec." in t.read_text().replace("runtime spec", "")}
    assert reads_spec == set()
    from slurmgen.script import render
    assert '"spec":' not in Path(render.__file__).read_text() and "spec=spec" not in Path(render.__file__).read_text()
