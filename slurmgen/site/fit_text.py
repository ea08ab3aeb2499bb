"""What `slurmgen fit` prints: the table of strategies, the JSON, and check's one-line verdict."""

from __future__ import annotations

import json
from dataclasses import asdict

from slurmgen.site.fit import Fit, Strategy


def _gib(value: float) -> str:
    return f"{value:.1f}" if value < 100 else f"{value:.0f}"


def table(fit: Fit) -> str:
    m, tr = fit.model, fit.training
    layout = ",".join(map(str, fit.gpus))
    gpu = ",".join(f"{g:g}" for g in dict.fromkeys(fit.gpu_gib))
    host = "host memory not given (--mem): not checked" if not fit.host_gib else \
        f"{','.join(f'{h:g}' for h in dict.fromkeys(fit.host_gib))} GiB host memory per node"
    lines = [
        f"model {fit.model_name}: {m.model_type or 'model'}, {m.params / 1e9:.2f} B parameters, {m.layers} layers",
        f"layout {layout}: {sum(fit.gpus)} ranks on {len(fit.gpus)} nodes, {gpu} GiB per GPU, {host}",
        f"training: {tr.tokens} tokens per micro batch, gradient checkpointing {'on' if tr.checkpointing else 'off'},"
        f" weights {tr.weight_bytes * 8}-bit, LoRA r {tr.lora_r}",
        "",
        f"{'strategy':<20}{'weights':>9}{'grads':>8}{'optim':>8}{'activ':>8}{'other':>8}{'GPU GiB':>9}"
        f"{'host GiB/node':>15}  verdict",
    ]
    for est in fit.estimates:
        mark = "fits" if est.fits else f"does not fit: {est.why}"
        lines.append(f"{est.strategy:<20}{_gib(est.weights):>9}{_gib(est.gradients):>8}{_gib(est.optimizer):>8}"
                     f"{_gib(est.activations):>8}{_gib(est.overhead):>8}{_gib(est.total):>9}"
                     f"{_gib(max(est.host_per_node)):>15}  {mark}")
    lines.append("")
    chosen = fit.chosen
    lines.append(f"your arguments select {chosen_name(fit)}:"
                 f" {'fits' if chosen.fits else 'does not fit (' + chosen.why + ')'}")
    if fit.recommended:
        lines.append(f"recommended: {fit.recommended.strategy}, with the training arguments"
                     f" {_join(fit.recommended.arguments) or '(none: plain DDP)'}")
    else:
        lines.append("nothing fits: more GPUs, GPUs with more memory, a shorter --max_length or a smaller"
                     " --per_device_train_batch_size (with --gradient_accumulation_steps)")
    return "\n".join(lines)


def chosen_name(fit: Fit) -> str:
    """The strategy the training arguments select, by its table name when it has one."""
    return fit.chosen.strategy if fit.chosen.strategy != "your arguments" else _describe(fit.training.chosen)


def _describe(s: Strategy) -> str:
    parts = ["FSDP" if s.sharded else "DDP"] + (["CPU offload"] if s.offload else []) + \
            (["QLoRA 4-bit"] if s.four_bit else ["LoRA"] if s.lora else [])
    return " + ".join(parts)


def _join(args: list[str]) -> str:
    import shlex

    return shlex.join(args)


def as_json(fit: Fit) -> str:
    return json.dumps({
        "model": fit.model_name, "params": fit.model.params, "gpus": list(fit.gpus),
        "gpu_gib": list(fit.gpu_gib), "host_gib": list(fit.host_gib) if fit.host_gib else None,
        "strategies": [asdict(e) for e in fit.estimates],
        "chosen": asdict(fit.chosen) if fit.chosen else None,
        "recommended": fit.recommended.strategy if fit.recommended else None,
        "arguments": fit.recommended.arguments if fit.recommended else None,
    }, indent=1)


def verdict_line(fit: Fit) -> str:
    """One line for `check`: the chosen strategy's verdict, and the nearest that fits when it does not."""
    chosen = fit.chosen
    name = chosen_name(fit)
    if chosen.fits:
        return f"fit: {fit.model_name} with {name}: fits ({chosen.total:.1f} GiB per GPU of {min(fit.gpu_gib):g})"
    nearest = (f"; the nearest that fits: {fit.recommended.strategy}, with the training arguments"
               f" {_join(fit.recommended.arguments) or '(none)'}") if fit.recommended else "; nothing fits (slurmgen fit)"
    return f"cannot run: {fit.model_name} with {name} does not fit ({chosen.why}){nearest}"


def spares_line(fit: Fit, spares: int, gpus: int) -> str:
    """--spares: a spare holds the ranks of the node it replaces, so the figures hold for it too."""
    return (f"spares: {spares} node(s) x {gpus} GPU(s), each holding the ranks of the node it replaces: the figures"
            f" above hold for a spare whose GPUs have {min(fit.gpu_gib):g} GiB or more")
