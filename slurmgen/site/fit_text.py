"""What `slurmgen fit` prints: the table of strategies, the JSON, and check's one-line verdict.

A verdict never says "fits" of a budget that was not checked: where host memory is unknown (no
--mem, no answer from the cluster) it says "GPU fits; host memory not checked" with the host
memory the strategy needs."""

from __future__ import annotations

import json
import shlex
from dataclasses import asdict

from slurmgen.site.fit import Estimate, Fit, Strategy

NAME_WIDTH = 28


def _per_node(values, fmt) -> str:
    """One figure when every node has the same, else one per node in --gpus order."""
    shown = ["?" if v is None else fmt(v) for v in values]
    return shown[0] if len(set(shown)) == 1 else ",".join(shown)


def _gib(value: float) -> str:
    return f"{value:.1f}" if value < 100 else f"{value:.0f}"


def verdict(est: Estimate) -> str:
    if not est.fits:
        return f"does not fit: {est.why}"
    if est.host_checked:
        return "fits"
    return f"GPU fits; host memory not checked (needs {max(est.host_per_node):.0f} GiB on a node)"


def _host_line(fit: Fit) -> str:
    known = [h for h in fit.host_gib if h is not None]
    if not known:
        return "host memory unknown (no --mem, no answer from the cluster): not checked"
    return f"{_per_node(fit.host_gib, lambda h: f'{h:.0f}')} GiB host memory per node ({fit.host_source})"


def table(fit: Fit) -> str:
    m, tr = fit.model, fit.training
    layout = ",".join(map(str, fit.gpus))
    gpu = _per_node(fit.gpu_gib, lambda g: f"{g:g}")
    lines = [
        f"model {fit.model_name}: {m.model_type or 'model'}, {m.params / 1e9:.2f} B parameters, {m.layers} layers",
        f"layout {layout}: {sum(fit.gpus)} ranks on {len(fit.gpus)} nodes, {gpu} GiB per GPU, {_host_line(fit)}",
        f"training: {tr.tokens} tokens per micro batch, gradient checkpointing {'on' if tr.checkpointing else 'off'},"
        f" weights {tr.weight_bytes * 8}-bit, {'bf16 mixed precision' if tr.mixed else 'no mixed precision'},"
        f" {'eager' if tr.eager else 'SDPA'} attention, LoRA r {tr.lora_r}",
        "",
        f"{'strategy':<{NAME_WIDTH}}{'weights':>8}{'grads':>7}{'optim':>7}{'activ':>7}{'other':>7}{'GPU GiB':>9}"
        f"{'host GiB/node':>15}  verdict",
    ]
    for est in fit.estimates:
        lines.append(f"{est.strategy:<{NAME_WIDTH}}{_gib(est.weights):>8}{_gib(est.gradients):>7}"
                     f"{_gib(est.optimizer):>7}{_gib(est.activations):>7}{_gib(est.overhead):>7}{_gib(est.total):>9}"
                     f"{_gib(max(est.host_per_node)):>15}  {verdict(est)}")
    lines.append("")
    chosen = fit.chosen
    lines.append(f"your arguments select {chosen_name(fit)}: {verdict(chosen)}")
    lines.append(decision(fit))
    return "\n".join(lines)


def decision(fit: Fit) -> str:
    """The recommendation, or that nothing fits: the line the exit status follows."""
    rec = fit.recommended
    if not rec:
        return ("nothing fits: more GPUs, GPUs with more memory, a shorter --max_length or a smaller"
                " --per_device_train_batch_size (with --gradient_accumulation_steps)")
    caveat = "" if rec.host_checked else (f" (GPU memory checked; host memory not checked: it needs"
                                          f" {max(rec.host_per_node):.0f} GiB on a node)")
    if rec is fit.chosen and rec.strategy == "your arguments":
        return f"recommended: your arguments as given ({chosen_name(fit)}){caveat}"
    return (f"recommended: {rec.strategy}, with the training arguments"
            f" {_join(rec.arguments) or '(none: plain DDP)'}{caveat}")


def chosen_name(fit: Fit) -> str:
    """The strategy the training arguments select, by its table name when it has one."""
    return fit.chosen.strategy if fit.chosen.strategy != "your arguments" else _describe(fit.training.chosen)


def _describe(s: Strategy) -> str:
    parts = ["FSDP" if s.sharded else "DDP"] + (["CPU offload"] if s.offload else []) + \
            (["QLoRA 4-bit"] if s.four_bit else ["LoRA"] if s.lora else [])
    reading = " (every rank reads the model)" if s.sharded and not s.one_reader and not s.four_bit else ""
    return " + ".join(parts) + reading


def _join(args: list[str]) -> str:
    return shlex.join(args)


def as_json(fit: Fit) -> str:
    return json.dumps({
        "model": fit.model_name, "params": fit.model.params, "gpus": list(fit.gpus),
        "gpu_gib": list(fit.gpu_gib), "host_gib": list(fit.host_gib), "host_source": fit.host_source,
        "strategies": [{**asdict(e), "verdict": verdict(e)} for e in fit.estimates],
        "chosen": {**asdict(fit.chosen), "verdict": verdict(fit.chosen)} if fit.chosen else None,
        "recommended": fit.recommended.strategy if fit.recommended else None,
        "arguments": fit.recommended.arguments if fit.recommended else None,
    }, indent=1)


def verdict_line(fit: Fit) -> str:
    """One line for `check`: the chosen strategy's verdict, and the nearest that fits when it does not."""
    chosen = fit.chosen
    name = chosen_name(fit)
    if chosen.fits:
        return (f"fit: {fit.model_name} with {name}: {verdict(chosen)} ({chosen.total:.1f} GiB per GPU of"
                f" {min(fit.gpu_gib):g})")
    nearest = (f"; the nearest that fits: {fit.recommended.strategy}, with the training arguments"
               f" {_join(fit.recommended.arguments) or '(none)'}") if fit.recommended else "; nothing fits (slurmgen fit)"
    return f"cannot run: {fit.model_name} with {name} does not fit ({chosen.why}){nearest}"


def spares_line(fit: Fit, spares: int, gpus: int) -> str:
    """--spares: a spare holds the ranks of the node it replaces, so the figures hold for it too."""
    return (f"spares: {spares} node(s) x {gpus} GPU(s), each holding the ranks of the node it replaces: the figures"
            f" above hold for a spare whose GPUs have {min(fit.gpu_gib):g} GiB or more")
