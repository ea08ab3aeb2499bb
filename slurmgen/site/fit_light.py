"""`slurmgen fit` on a login node without torch: the counts train.sizing takes from the meta model,
here from config.json alone, for the families that cover most fine-tuning (Llama, Mistral, Qwen2,
Qwen3, Gemma 1/2/3, GPT-NeoX, Falcon), and the training arguments read without TRL's parser.

The counts are exact, not estimated: tests/test_fit_light.py builds each family's model on the
meta device and compares every figure. Defaults for keys a config.json leaves out are each
family's own (transformers' configuration classes).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Optional

from slurmgen.site.fit_model import FitError

FAMILIES = ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text", "gpt_neox", "falcon")
_LLAMA_LIKE = {  # model_type -> (default head_dim, default tie_word_embeddings, norms per block, q/k norms)
    "llama": (None, False, 2, False),
    "mistral": (None, False, 2, False),
    "qwen2": (None, False, 2, False),
    "qwen3": (128, False, 2, True),
    "gemma": (256, True, 2, False),
    "gemma2": (256, True, 4, False),
    "gemma3_text": (256, True, 4, True),
}
# PEFT's default LoRA targets (peft.utils.constants.TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING)
LORA_DEFAULTS = {**{family: ["q_proj", "v_proj"] for family in _LLAMA_LIKE},
                 "gpt_neox": ["query_key_value"], "falcon": ["query_key_value"]}


def _need(config: dict, key: str, where: str):
    if config.get(key) is None:
        raise FitError(f"{where}: no {key} in config.json")
    return config[key]


def _linears(shapes: dict, layers: int) -> dict:
    """name -> {count, in, out}, as train.sizing lists the linear layers of the blocks."""
    return {name: {"count": layers, "in": i, "out": o} for name, (i, o) in shapes.items()}


def llama_like(c: dict, family: str, where: str) -> dict:
    head_dim_default, tied_default, norms, qk_norm = _LLAMA_LIKE[family]
    h, layers = _need(c, "hidden_size", where), _need(c, "num_hidden_layers", where)
    inter, vocab = _need(c, "intermediate_size", where), _need(c, "vocab_size", where)
    heads = _need(c, "num_attention_heads", where)
    kv = c.get("num_key_value_heads") or heads
    head_dim = c.get("head_dim") or head_dim_default or h // heads
    q, k = heads * head_dim, kv * head_dim
    linear = {"q_proj": (h, q), "k_proj": (h, k), "v_proj": (h, k), "o_proj": (q, h),
              "gate_proj": (h, inter), "up_proj": (h, inter), "down_proj": (inter, h)}
    weights = sum(i * o for i, o in linear.values())
    qkv_bias = family == "qwen2" or bool(c.get("attention_bias"))
    biases = (q + 2 * k if qkv_bias else 0) + (h if c.get("attention_bias") else 0)
    biases += 2 * inter + h if c.get("mlp_bias") else 0
    block = weights + biases + norms * h + (2 * head_dim if qk_norm else 0)
    tied = c.get("tie_word_embeddings", tied_default)
    return _shape(family, layers, block, weights, linear, h, inter, vocab, heads, kv, head_dim, tied,
                  norms, gated=True, final_norm=h)


def gpt_neox(c: dict, where: str) -> dict:
    h, layers = _need(c, "hidden_size", where), _need(c, "num_hidden_layers", where)
    inter, vocab = _need(c, "intermediate_size", where), _need(c, "vocab_size", where)
    heads = _need(c, "num_attention_heads", where)
    linear = {"query_key_value": (h, 3 * h), "dense": (h, h), "dense_h_to_4h": (h, inter), "dense_4h_to_h": (inter, h)}
    weights = sum(i * o for i, o in linear.values())
    attn_bias = c.get("attention_bias", True)
    biases = (3 * h + h if attn_bias else 0) + inter + h
    block = weights + biases + 2 * 2 * h  # two LayerNorms with bias
    return _shape("gpt_neox", layers, block, weights, linear, h, inter, vocab, heads, heads, h // heads,
                  c.get("tie_word_embeddings", False), 2, gated=False, final_norm=2 * h)


def falcon(c: dict, where: str) -> dict:
    h, layers = _need(c, "hidden_size", where), _need(c, "num_hidden_layers", where)
    vocab, heads = _need(c, "vocab_size", where), _need(c, "num_attention_heads", where)
    head_dim = h // heads
    new, multi = bool(c.get("new_decoder_architecture")), c.get("multi_query", True)
    kv = (c.get("num_kv_heads") or heads) if new or not multi else 1
    qkv = (kv * 2 + heads) * head_dim if new else (h + 2 * head_dim if multi else 3 * h)
    inter = c.get("ffn_hidden_size") or 4 * h
    linear = {"query_key_value": (h, qkv), "dense": (h, h), "dense_h_to_4h": (h, inter), "dense_4h_to_h": (inter, h)}
    weights = sum(i * o for i, o in linear.values())
    biases = qkv + h + inter + h if c.get("bias") else 0
    lns = c.get("num_ln_in_parallel_attn") or (2 if new else 1)
    norms = 2 if not c.get("parallel_attn", True) else lns
    block = weights + biases + norms * 2 * h
    return _shape("falcon", layers, block, weights, linear, h, inter, vocab, heads, kv, head_dim,
                  c.get("tie_word_embeddings", True), norms, gated=False, final_norm=2 * h)


def _shape(family, layers, block, weights, linear, h, inter, vocab, heads, kv, head_dim, tied, norms,
           gated, final_norm) -> dict:
    embed = vocab * h
    params = layers * block + embed + final_norm + (0 if tied else embed)
    return {"model_type": family, "params": params, "quantizable_params": layers * weights,
            "linear": _linears(linear, layers), "layers": layers, "block_params": block, "hidden": h,
            "intermediate": inter, "vocab": vocab, "heads": heads, "kv_heads": kv, "head_dim": head_dim,
            "tied": bool(tied), "norms": norms, "gated": gated, "lora_default_targets": LORA_DEFAULTS[family]}


def count(config: dict, where: str) -> dict:
    """config.json's content -> the counts train.sizing would print for the meta model."""
    family = config.get("model_type")
    if family in _LLAMA_LIKE:
        return llama_like(config, family, where)
    if family == "gpt_neox":
        return gpt_neox(config, where)
    if family == "falcon":
        return falcon(config, where)
    raise FitError(f"{where}: model_type {family!r}: without torch, slurmgen fit counts {', '.join(FAMILIES)};"
                   f" for others it builds the model on the meta device: pip install 'slurmgen[train]'")


def config_path(name: str) -> Optional[Path]:
    """A model's config.json: a directory, the file itself, or a hub name already in the cache."""
    path = Path(name).expanduser()
    if path.is_file():
        return path
    if (path / "config.json").is_file():
        return path / "config.json"
    hub = os.environ.get("HF_HUB_CACHE") or os.path.join(
        os.environ.get("HF_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "huggingface"), "hub")
    repo = Path(hub) / ("models--" + name.replace("/", "--"))
    try:
        revision = (repo / "refs" / "main").read_text().strip()
    except OSError:
        return None
    found = repo / "snapshots" / revision / "config.json"
    return found if found.is_file() else None


def read_config(name: str) -> dict:
    path = config_path(name)
    if path is None:
        raise FitError(f"--model_name_or_path {name}: cannot read its config.json (not a directory with one,"
                       f" nor a hub name in the cache)")
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise FitError(f"--model_name_or_path {name}: cannot read its config.json ({exc})") from None
    return config


# ---------------------------------------------------------------------------- training arguments
# TRL's defaults (SFTConfig, ModelConfig) for the arguments that change the arithmetic; None for
# bf16 means "by the GPU's capability", as train.sft decides.
DEFAULTS = {"model_name_or_path": None, "dtype": "float32", "bf16": None, "fp16": False, "max_length": 1024,
            "per_device_train_batch_size": 8, "gradient_checkpointing": True, "use_peft": False, "lora_r": 16,
            "lora_target_modules": None, "lora_dropout": 0.05, "load_in_4bit": False, "load_in_8bit": False,
            "use_bnb_nested_quant": False, "bnb_4bit_quant_storage": None, "fsdp": None, "fsdp_config": None,
            "optim": "adamw_torch_fused", "attn_implementation": None}
_BOOL = {k for k, v in DEFAULTS.items() if isinstance(v, bool)} | {"bf16"}
_INT = {"max_length", "per_device_train_batch_size", "lora_r"}


def _value(name: str, text: str):
    if name in _BOOL:
        lowered = text.lower()
        if lowered not in ("true", "false", "1", "0", "yes", "no"):
            raise FitError(f"--{name} {text!r}: expected true or false")
        return lowered in ("true", "1", "yes")
    if name in _INT:
        try:
            return int(text)
        except ValueError:
            raise FitError(f"--{name} {text!r}: expected a whole number") from None
    if name == "lora_dropout":
        try:
            return float(text)
        except ValueError:
            raise FitError(f"--{name} {text!r}: expected a number") from None
    return text


def parse_settings(argv: list[str]) -> dict:
    """The settings train.sizing reads with TRL's parser, read from the arguments directly
    (--name value, --name=value, a bare boolean flag, --config recipe.yaml); others are left alone."""
    settings = dict(DEFAULTS)
    if "--config" in argv:
        settings.update(_recipe(argv[argv.index("--config") + 1] if argv.index("--config") + 1 < len(argv) else ""))
    i = 0
    while i < len(argv):
        arg = argv[i]
        name, eq, inline = arg[2:].partition("=") if arg.startswith("--") else ("", "", "")
        name = name.replace("-", "_")
        if name == "lora_target_modules" and not eq:
            values = []
            while i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                values.append(argv[i + 1])
                i += 1
            settings[name] = values or None
        elif name in DEFAULTS:
            if eq:
                settings[name] = _value(name, inline)
            elif name in _BOOL and (i + 1 >= len(argv) or argv[i + 1].startswith("--")):
                settings[name] = True
            elif name == "fsdp" and (i + 1 >= len(argv) or argv[i + 1].startswith("--")):
                settings[name] = True  # transformers 5: a bare --fsdp turns it on
            elif i + 1 < len(argv):
                settings[name] = _value(name, argv[i + 1])
                i += 1
        i += 1
    if not settings["model_name_or_path"]:
        raise FitError("give the model: slurmgen fit ... -- --model_name_or_path M")
    return settings


def _recipe(path: str) -> dict:
    try:
        import yaml
    except ImportError:
        raise FitError(f"--config {path}: reading a YAML recipe needs PyYAML (pip install pyyaml)") from None
    try:
        with open(path) as fh:
            data = yaml.safe_load(fh) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise FitError(f"--config {path}: cannot read it ({exc})") from None
    return {k: v for k, v in data.items() if k in DEFAULTS}
