"""What `slurmgen fit` needs to know about a model and its training arguments, as JSON.

    python -m train.sizing -- --model_name_or_path M [training args]

The model is built from its configuration alone on the meta device: nothing is read but
config.json (a directory, the file itself, or a hub name already in the cache), no weight is
loaded or downloaded. The training arguments are read with TRL's own parser (SFTConfig and
ModelConfig, `--config recipe.yaml` too) without building the configs, whose checks ask for the
machine's GPU (this runs on a login node); arguments it does not know are left alone (a user's
own script has its own).

Prints one JSON object: the parameter counts slurmgen.site.fit does its arithmetic on, and the
settings of the training arguments that change it.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict

from train import cli

# Keep in step with slurmgen.site.fit_light.DEFAULTS: the arguments that change the arithmetic.
SETTINGS = ("model_name_or_path", "dtype", "bf16", "fp16", "max_length", "per_device_train_batch_size",
            "gradient_checkpointing", "use_peft", "lora_r", "lora_target_modules", "lora_dropout", "load_in_4bit",
            "load_in_8bit", "use_bnb_nested_quant", "bnb_4bit_quant_storage", "fsdp", "fsdp_config", "optim",
            "attn_implementation")


def parse_settings(argv: list[str]) -> dict:
    import yaml
    from trl import ModelConfig, ScriptArguments, SFTConfig, TrlParser

    parser = TrlParser((ScriptArguments, SFTConfig, ModelConfig))
    cli.one_line_parser_errors(parser)
    if "--config" in argv:
        cli.reject_old_config_keys(argv, {})
        with open(argv[argv.index("--config") + 1]) as fh:
            parser.set_defaults(**(yaml.safe_load(fh) or {}))
    namespace, _unknown = parser.parse_known_args(argv)
    settings = {name: getattr(namespace, name, None) for name in SETTINGS}
    if not settings["model_name_or_path"]:
        raise cli.UsageError("give the model: slurmgen fit ... -- --model_name_or_path M")
    return settings


def meta_model(name: str):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    try:
        config = AutoConfig.from_pretrained(name)
    except (OSError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise cli.UsageError(f"--model_name_or_path {name}: cannot read its config.json ({first})") from None
    with torch.device("meta"):
        return config, AutoModelForCausalLM.from_config(config)


def shape(model, config) -> dict:
    """Counts by kind: every parameter once (tied ones too), the linear layers a 4-bit
    quantization would store in 4 bits (all but the output head), by their module name's last
    part with their shapes (for LoRA), the largest repeated block (what FSDP gathers), and the
    shapes the activations depend on (attention heads, norms per block, a gated MLP)."""
    import torch

    params = sum(p.numel() for p in model.parameters())
    linear: dict[str, dict] = defaultdict(lambda: {"count": 0, "in": 0, "out": 0})
    quantizable = 0
    output = model.get_output_embeddings()
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear) and module is not output:
            kind = linear[name.rsplit(".", 1)[-1]]
            kind["count"] += 1
            kind["in"], kind["out"] = module.in_features, module.out_features
            quantizable += module.weight.numel()
    blocks = max((m for m in model.modules() if isinstance(m, torch.nn.ModuleList)),
                 key=lambda m: len(m), default=None)
    block_params = max((sum(p.numel() for p in b.parameters()) for b in blocks), default=0) if blocks else 0
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    hidden = getattr(text, "hidden_size", 0)
    heads = getattr(text, "num_attention_heads", 0) or 1
    first = blocks[0] if blocks else None
    norms = sum(1 for m in first.modules() if type(m).__name__.endswith("Norm")
                and getattr(m, "weight", None) is not None and tuple(m.weight.shape) == (hidden,)) if first else 0
    embeddings = model.get_input_embeddings()
    return {
        "model_type": config.model_type,
        "params": params,
        "quantizable_params": quantizable,
        "linear": dict(linear),
        "layers": len(blocks) if blocks else 0,
        "block_params": block_params,
        "hidden": getattr(text, "hidden_size", 0),
        # the MLP's width: the input of the block's last layer back to the hidden size (its down
        # projection; Falcon's config names the width ffn_hidden_size)
        "intermediate": next((k["in"] for k in reversed(list(linear.values())) if k["out"] == hidden), 4 * hidden),
        "vocab": getattr(text, "vocab_size", 0),
        "heads": heads,
        "kv_heads": getattr(text, "num_key_value_heads", None) or heads,
        "head_dim": getattr(text, "head_dim", None) or hidden // heads,
        "tied": output is not None and embeddings is not None and output.weight is embeddings.weight,
        "norms": norms,
        "gated": "gate_proj" in linear,
        "lora_default_targets": lora_default_targets(config.model_type),
    }


def lora_default_targets(model_type: str) -> list[str]:
    """The modules PEFT adapts when --lora_target_modules is not given."""
    try:
        from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as defaults
    except ImportError:
        return []
    return list(defaults.get(model_type, []))


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--"]:
        argv = argv[1:]
    with cli.cli_errors():
        settings = parse_settings(argv)
        config, model = meta_model(settings["model_name_or_path"])
        print(json.dumps({"model": shape(model, config), "settings": settings}))


if __name__ == "__main__":
    main()
