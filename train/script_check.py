"""Read a user's training script without running it: the lines that would fail on every rank
after the queue wait, each with its one-line fix.

    python -m train.script_check SCRIPT [--cpu-only] [--resume-auto] [--gpus 1,1,2,2] [--layout-only]

Prints one finding per line, `SCRIPT:LINE: what: fix`, and exits 0 (none), 1 (some) or 2 (the
script cannot be read or parsed). What it looks for:
  * (a note, `SCRIPT:LINE: note: ...`, which loses work rather than fails) `trainer.train()` without
    resume_from_checkpoint in a script that builds a Trainer, unless the job resumes it (--resume-auto);
  * keyword arguments the installed TRL and transformers no longer take, in calls of SFTTrainer,
    SFTConfig, Trainer and TrainingArguments (checked against the installed signatures; known
    renames get their new name);
  * `device_map=` in from_pretrained: one model spread over every GPU of the node, in every rank;
  * `load_in_8bit=`/`load_in_4bit=` given to from_pretrained rather than in a quantization config;
  * `init_process_group("nccl")` when the job's nodes have no GPU (--cpu-only);
  * a Lightning Trainer without train.lightning's UnevenDDPStrategy when the job's nodes hold
    different numbers of GPUs (--gpus, one count per node): Lightning stops every rank at start.
--layout-only: the last alone (it imports nothing: what `slurmgen render --script` asks).
Only the call's last name is matched (`trl.SFTTrainer(...)` and `SFTTrainer(...)` alike), so a
class of the same name from elsewhere is read as these are, but a Trainer imported from Lightning
is Lightning's; the script is never imported.
"""

from __future__ import annotations

import ast
import inspect
import sys
from dataclasses import fields, is_dataclass

# (callee, keyword) -> the fix, for the renames and moves users meet in older examples.
KNOWN = {
    ("SFTTrainer", "tokenizer"): "pass it as processing_class=... (TRL renamed tokenizer= to processing_class=)",
    ("Trainer", "tokenizer"): "pass it as processing_class=... (transformers renamed tokenizer= to processing_class=)",
    ("SFTTrainer", "max_seq_length"): "give SFTConfig(max_length=...) as args= (renamed, and moved to SFTConfig)",
    ("SFTConfig", "max_seq_length"): "use max_length=... (TRL renamed max_seq_length to max_length)",
    ("TrainingArguments", "evaluation_strategy"): "use eval_strategy=... (transformers renamed it)",
    ("SFTConfig", "evaluation_strategy"): "use eval_strategy=... (transformers renamed it)",
    ("TrainingArguments", "no_cuda"): "use use_cpu=... (transformers renamed it)",
    ("SFTConfig", "no_cuda"): "use use_cpu=... (transformers renamed it)",
}
QUANTIZE = "load_in_8bit", "load_in_4bit"


def accepted(callee: str):
    """The keyword names the installed callee takes; None when it takes any (or is unknown)."""
    if callee in ("SFTTrainer", "SFTConfig"):
        import trl

        target = getattr(trl, callee)
    elif callee in ("Trainer", "TrainingArguments"):
        import transformers

        target = getattr(transformers, callee)
    else:
        return None
    if is_dataclass(target):
        return {f.name for f in fields(target)}
    params = inspect.signature(target.__init__).parameters.values()
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return None
    return {p.name for p in params} - {"self"}


def version_of(callee: str) -> str:
    import importlib.metadata

    package = "trl" if callee.startswith("SFT") else "transformers"
    return f"{package} {importlib.metadata.version(package)}"


def callee_name(call: ast.Call) -> str:
    func = call.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


def _taken(callee: str, cache: dict):
    if callee not in cache:
        cache[callee] = accepted(callee)
    return cache[callee]


def keyword_findings(call: ast.Call, callee: str, cache: dict) -> list[tuple[int, str]]:
    taken = _taken(callee, cache)
    out = []
    for kw in call.keywords:
        if kw.arg is None or (taken is not None and kw.arg in taken):
            continue
        fix = KNOWN.get((callee, kw.arg))
        if fix is None and taken is None:
            continue
        if fix is None and callee == "SFTTrainer" and kw.arg in (_taken("SFTConfig", cache) or ()):
            fix = f"give SFTConfig({kw.arg}=...) as args= (an SFTConfig option now)"
        out.append((kw.lineno, f"{callee}({kw.arg}=...): {version_of(callee)} takes no {kw.arg}=; {fix or 'remove it'}"))
    return out


def from_pretrained_findings(call: ast.Call) -> list[tuple[int, str]]:
    out = []
    for kw in call.keywords:
        if kw.arg == "device_map" and not _per_rank(kw.value):
            shown = ast.unparse(kw.value)
            out.append((kw.lineno, f"from_pretrained(device_map={shown}): spreads one model over every GPU of the node in"
                       f" every rank, wrong under torchrun (DDP, FSDP); drop it (each rank trains on its own GPU),"
                       f" or for 4-bit use device_map={{'': int(os.environ['LOCAL_RANK'])}}"))
        if kw.arg in QUANTIZE:
            out.append((kw.lineno, f"from_pretrained({kw.arg}=...): transformers takes it only inside a"
                                   f" quantization config; use quantization_config=BitsAndBytesConfig({kw.arg}=True)"))
    return out


def _per_rank(value: ast.expr) -> bool:
    """device_map={"": LOCAL_RANK-ish}: one device for the whole model, this rank's own."""
    return isinstance(value, ast.Dict) and len(value.keys) == 1 and \
        isinstance(value.keys[0], ast.Constant) and value.keys[0].value == ""


def nccl_findings(call: ast.Call) -> list[str]:
    backend = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "backend"), None)
    if isinstance(backend, ast.Constant) and isinstance(backend.value, str) and "nccl" in backend.value:
        return [f'init_process_group("{backend.value}"): the job\'s nodes have no GPU and nccl needs one;'
                f' use "gloo", or leave the backend out (torch picks gloo on CPU, nccl on GPUs)']
    return []


NOTE = "note: "  # what does not fail, but loses work: a run that never resumes
LIGHTNING = ("lightning", "pytorch_lightning")
STRATEGY = "UnevenDDPStrategy"


def lightning_trainers(tree: ast.AST) -> set[ast.Call]:
    """The calls that build Lightning's Trainer: `Trainer(...)` where Trainer was imported from
    Lightning, and `L.Trainer(...)`, `pl.Trainer(...)`, `lightning.pytorch.Trainer(...)`."""
    modules, names = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules |= {a.asname or a.name.split(".")[0] for a in node.names if a.name.split(".")[0] in LIGHTNING}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in LIGHTNING:
            names |= {a.asname or a.name for a in node.names if a.name == "Trainer"}
            modules |= {a.asname or a.name for a in node.names if a.name == "pytorch"}  # from lightning import pytorch

    def root(expr: ast.expr) -> str:
        while isinstance(expr, ast.Attribute):
            expr = expr.value
        return expr.id if isinstance(expr, ast.Name) else ""

    return {node for node in ast.walk(tree) if isinstance(node, ast.Call) and (
        (isinstance(node.func, ast.Name) and node.func.id in names)
        or (isinstance(node.func, ast.Attribute) and node.func.attr == "Trainer" and root(node.func) in modules))}


def lightning_findings(tree: ast.AST, trainers: set[ast.Call], gpus: tuple[int, ...]) -> list[tuple[int, str]]:
    """On nodes of different widths, a Lightning Trainer needs train.lightning's strategy: Lightning
    checks devices x num_nodes against the world size (every rank stops at start), and its sampler
    would shard the data for that many ranks."""
    named = {getattr(n, "id", None) or getattr(n, "attr", None) for n in ast.walk(tree)}
    named |= {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
    if len(set(gpus)) < 2 or STRATEGY in named:
        return []
    layout = ",".join(map(str, gpus))
    return [(call.lineno, f"{ast.unparse(call.func)}(...): Lightning assumes the same number of devices on every"
                          f" node, and these nodes have {layout} GPUs: every rank would stop at start (devices x"
                          f" num_nodes is not the world size, {sum(gpus)}); pass strategy=UnevenDDPStrategy()"
                          f" (from train.lightning import UnevenDDPStrategy)")
            for call in sorted(trainers, key=lambda c: c.lineno)]


def resume_findings(tree: ast.AST) -> list[tuple[int, str]]:
    """`trainer.train()` without resume_from_checkpoint, in a script that builds a Trainer: after a
    requeue (time limit, preemption, a retry) the run would start again from step 0."""
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
    if not any(callee_name(c).endswith("Trainer") for c in calls):
        return []
    return [(c.lineno, f"{NOTE}{ast.unparse(c.func)}() passes no resume_from_checkpoint: a requeued run"
                       " (time limit, preemption, retry) starts again from step 0; render with --resume auto,"
                       " or pass resume_from_checkpoint=True")
            for c in calls if isinstance(c.func, ast.Attribute) and c.func.attr == "train" and not c.args
            and not any(k.arg in ("resume_from_checkpoint", None) for k in c.keywords)]


def check(source: str, cpu_only: bool = False, resume_auto: bool = False, gpus: tuple[int, ...] = (),
          layout_only: bool = False) -> list[tuple[int, str]]:
    """(line, finding) for the source, in line order."""
    cache: dict = {}
    tree = ast.parse(source)
    ours = lightning_trainers(tree)
    found = lightning_findings(tree, ours, gpus)
    if layout_only:
        return sorted(found)
    found += [] if resume_auto else resume_findings(tree)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or node in ours:
            continue
        callee = callee_name(node)
        if callee in ("SFTTrainer", "SFTConfig", "Trainer", "TrainingArguments"):
            found += keyword_findings(node, callee, cache)
        elif callee == "from_pretrained":
            found += from_pretrained_findings(node)
        elif callee == "init_process_group" and cpu_only:
            found += [(node.lineno, f) for f in nccl_findings(node)]
    return sorted(found)


USAGE = "usage: python -m train.script_check SCRIPT [--cpu-only] [--resume-auto] [--gpus 1,1,2,2] [--layout-only]"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    gpus: tuple[int, ...] = ()
    if "--gpus" in argv:
        at = argv.index("--gpus")
        try:
            gpus = tuple(int(n) for n in argv[at + 1].split(","))
        except (IndexError, ValueError):
            print(USAGE, file=sys.stderr)
            return 2
        del argv[at:at + 2]
    flags = {"--cpu-only", "--resume-auto", "--layout-only"}
    paths = [a for a in argv if a not in flags]
    if len(paths) != 1:
        print(USAGE, file=sys.stderr)
        return 2
    path = paths[0]
    try:
        with open(path, encoding="utf-8") as fh:
            findings = check(fh.read(), "--cpu-only" in argv, "--resume-auto" in argv, gpus, "--layout-only" in argv)
    except (OSError, UnicodeDecodeError, SyntaxError) as exc:
        where = f" (line {exc.lineno})" if isinstance(exc, SyntaxError) else ""
        print(f"{path}: cannot read it as Python{where}: {exc.msg if isinstance(exc, SyntaxError) else exc}")
        return 2
    for line, text in findings:
        print(f"{path}:{line}: {text}")
    return 1 if any(not text.startswith(NOTE) for _, text in findings) else 0


if __name__ == "__main__":
    sys.exit(main())
