"""Would this model train on this layout, and how? `slurmgen fit`'s decision: every strategy
judged against the GPUs' and the hosts' memory, and the one to recommend.

The figures come from fit_memory (the accounting, checked against measurements and published
runs), the model's counts from train.sizing on the meta device where torch is installed, or from
config.json (fit_light) where it is not, the budgets from fit_budget. One decision gives both the
recommendation the table ends with and the exit status.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Optional

from slurmgen.site.fit_memory import GIB, Estimate, estimate
from slurmgen.site.fit_model import STRATEGIES, FitError, Model, Strategy, Training, shown_name, with_cpu

__all__ = ["GIB", "STRATEGIES", "Estimate", "Fit", "FitError", "Model", "Strategy", "Training", "assess",
           "assess_spec", "estimate", "selected", "with_cpu"]


def judge(est: Estimate, gpu_gib: tuple[float, ...], host_gib: tuple) -> Estimate:
    """Fits when every node's GPUs hold the per-GPU total and every node whose memory is known
    holds what its ranks load; host_checked says whether every node's was known."""
    short = []
    smallest = min(gpu_gib)
    if est.total > smallest:
        what = "while loading" if est.loading > est.train_total else "per GPU"
        short.append(f"{est.total:.1f} GiB {what} > {smallest:g}")
    over = [(need, have) for need, have in zip(est.host_per_node, host_gib) if have is not None and need > have]
    if over:
        need, have = max(over)
        short.append(f"{need:.0f} GiB of host memory on a node > {have:g}")
    est.fits, est.why = not short, "; ".join(short)
    est.host_checked = all(have is not None for have in host_gib)
    return est


def selected(training: Training) -> Strategy:
    """The row of the table the training arguments select, or their own strategy when none does."""
    b = training.weight_bytes
    return next((s for s in STRATEGIES if s.kind(b) == training.chosen.kind(b)), training.chosen)


def preference(training: Training) -> list[Strategy]:
    """Which fitting strategy to recommend: the user's own kind of training first (all
    parameters, or adapters), each from the simplest and fastest to the most frugal."""
    full = [s for s in STRATEGIES if not s.lora]
    by_name = {s.name: s for s in STRATEGIES}
    adapters = [by_name[n] for n in ("DDP + LoRA", "FSDP + LoRA", "DDP + QLoRA 4-bit", "FSDP + QLoRA",
                                     "FSDP + LoRA + CPU offload", "FSDP + QLoRA + CPU offload") if n in by_name]
    return adapters + full if training.chosen.lora else full + adapters


@dataclass
class Fit:
    model_name: str
    model: Model
    training: Training
    gpus: tuple[int, ...]
    gpu_gib: tuple[float, ...]
    host_gib: tuple  # GiB per node, None where unknown
    host_source: str = ""
    estimates: list[Estimate] = field(default_factory=list)
    chosen: Optional[Estimate] = None
    recommended: Optional[Estimate] = None

    @property
    def ok(self) -> bool:
        """The one decision: a recommendation exists (exit 0), or nothing fits (exit 1)."""
        return self.recommended is not None


def assess(model_name: str, model: Model, training: Training, gpus: tuple[int, ...],
           gpu_gib: tuple[float, ...], host_gib: Optional[tuple] = None, host_source: str = "") -> Fit:
    host_gib = tuple(host_gib) if host_gib else tuple(None for _ in gpus)
    fit = Fit(model_name, model, training, gpus, gpu_gib, host_gib, host_source)
    ranks = sum(gpus)
    fit.estimates = [judge(estimate(model, training, s, gpus), gpu_gib, host_gib) for s in STRATEGIES]
    by_name = {e.strategy: e for e in fit.estimates}
    chosen = selected(training)
    fit.chosen = by_name.get(shown_name(chosen, ranks)) if chosen in STRATEGIES else \
        judge(estimate(model, training, chosen, gpus), gpu_gib, host_gib)
    ranked = [by_name[shown_name(s, ranks)] for s in preference(training)]
    fit.recommended = next((e for e in ranked + [fit.chosen] if e.fits), None)
    return fit


@dataclass(frozen=True)
class Counted:
    name: str
    model: Model
    settings: dict


def torch_here() -> bool:
    """torch and transformers importable in this Python (looked up, not imported)."""
    import importlib.util

    return all(importlib.util.find_spec(m) is not None for m in ("torch", "transformers", "trl"))


def count(spec) -> Counted:
    """The model's counts: on the meta device by train.sizing where torch is installed (any
    architecture, TRL's own parser), else from config.json for the common families."""
    if not torch_here():
        from slurmgen.site import fit_light

        settings = fit_light.parse_settings(list(spec.train_args))
        name = settings["model_name_or_path"]
        shape = fit_light.count(fit_light.read_config(name), f"--model_name_or_path {name}")
        return Counted(name, Model.from_json(shape), settings)
    from slurmgen.site.train_tools import run_tool

    run = run_tool("train.sizing", ["--", *spec.train_args])
    if run.missing:
        raise FitError(f"slurmgen fit counts the model's parameters with torch and transformers: {run.why}")
    if run.returncode != 0:
        raise FitError(run.why.removeprefix("error: "))
    data = json.loads(run.stdout)
    return Counted(data["settings"]["model_name_or_path"], Model.from_json(data["model"]), data["settings"])


def assess_spec(spec, ask=None) -> Fit:
    """The whole fit for a job spec with --gpu-mem: count the model, read the budgets, judge
    every strategy (ask: the cluster query, for tests)."""
    from slurmgen.site import fit_budget

    gpu_gib = fit_budget.gpu_sizes(spec.gpu_mem, len(spec.gpus))
    counted = count(spec)
    host = fit_budget.host_budget(spec, ask)
    return assess(counted.name, counted.model, Training.from_settings(counted.settings), spec.gpus, gpu_gib,
                  host.gib, host.source)


