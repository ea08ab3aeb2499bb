"""What `slurmgen fit` knows before any arithmetic: the strategies (the rows of its table, each
with the training arguments that select it), the model's counts (train.sizing on the meta device,
or fit_light from config.json) and the settings of the training arguments that change the figures.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from typing import Optional

from slurmgen.plan.words import SpecError

_DTYPE_BYTES = {"float32": 4, None: 4, "bfloat16": 2, "float16": 2, "auto": 2}
_FLOAT_STORAGE = ("bfloat16", "float16", "float32")


class FitError(SpecError):
    """Bad input to fit: one line, exit status 2."""


@dataclass(frozen=True)
class Strategy:
    name: str
    sharded: bool = False
    offload: bool = False
    lora: bool = False
    four_bit: bool = False
    one_reader: bool = False  # FSDP's cpu_ram_efficient_loading: one rank per node reads the model
    float_storage: bool = True  # 4-bit packed in a floating dtype, which FSDP can shard
    weight_bytes: Optional[int] = None  # the --dtype its arguments set, when they set one

    def arguments(self, lora_r: int) -> list[str]:
        """The training arguments (TRL's, train.sft's) that select this strategy."""
        args = []
        if self.lora:
            args += ["--use_peft", "--lora_r", str(lora_r)]
        if self.four_bit:
            args += ["--load_in_4bit"]
            if self.sharded:  # FSDP shards floating-point storage only: 4-bit packed in bf16
                args += ["--bnb_4bit_quant_storage", "bfloat16", "--dtype", "bfloat16"]
        if self.sharded:  # FSDP2, each block its own unit (transformers' defaults)
            config = {**({"cpu_offload": True} if self.offload else {}),
                      **({"cpu_ram_efficient_loading": True} if self.one_reader else {})}
            args += ["--fsdp", *(["--fsdp_config", json.dumps(config)] if config else [])]
        return args

    def kind(self, weight_bytes: int) -> tuple:
        """What changes the arithmetic (the user's arguments select a row of the table by it)."""
        four_bit_sharded = self.four_bit and self.sharded
        return (self.sharded, self.offload, self.lora, self.four_bit, self.one_reader and not self.four_bit,
                self.float_storage or not four_bit_sharded, (self.weight_bytes or weight_bytes) if four_bit_sharded else 0)


STRATEGIES = (
    Strategy("DDP"),
    Strategy("DDP + LoRA", lora=True),
    Strategy("DDP + QLoRA 4-bit", lora=True, four_bit=True),
    Strategy("FSDP full shard", sharded=True, one_reader=True),
    Strategy("FSDP + CPU offload", sharded=True, offload=True, one_reader=True),
    Strategy("FSDP + LoRA", sharded=True, lora=True, one_reader=True),
    Strategy("FSDP + LoRA + CPU offload", sharded=True, offload=True, lora=True, one_reader=True),
    Strategy("FSDP + QLoRA", sharded=True, lora=True, four_bit=True, weight_bytes=2),
    Strategy("FSDP + QLoRA + CPU offload", sharded=True, offload=True, lora=True, four_bit=True, weight_bytes=2),
)


def shown_name(strategy: Strategy, ranks: int) -> str:
    """On one GPU the replicated strategies run without DDP: named for what they are."""
    return strategy.name.replace("DDP", "1 GPU", 1) if ranks == 1 and not strategy.sharded else strategy.name


@dataclass(frozen=True)
class Model:
    """What train.sizing counted on the meta model (or fit_light on config.json)."""
    params: int
    quantizable_params: int
    linear: dict
    layers: int
    block_params: int
    hidden: int
    intermediate: int
    vocab: int
    model_type: str = ""
    heads: int = 1
    kv_heads: int = 1
    head_dim: int = 0
    tied: bool = False
    norms: int = 2
    gated: bool = True
    lora_default_targets: tuple = ()

    @classmethod
    def from_json(cls, data: dict) -> "Model":
        fields = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        fields["lora_default_targets"] = tuple(fields.get("lora_default_targets", ()))
        return cls(**fields)


@dataclass(frozen=True)
class Training:
    """The settings of the training arguments that change the arithmetic."""
    weight_bytes: int = 4
    mixed: bool = True  # bf16/fp16 autocast: TRL's default wherever the GPU has it
    seq: int = 1024
    batch: int = 8
    checkpointing: bool = True
    eager: bool = False  # --attn_implementation eager: the attention matrix is kept
    lora_r: int = 16
    lora_targets: tuple = ()
    lora_dropout: float = 0.05
    nested_quant: bool = False
    optimizer_8bit: bool = False
    paged: bool = False  # a paged optimizer (bitsandbytes): its state spills to host memory, never OOMs
    chosen: Strategy = STRATEGIES[0]
    cpu: bool = False  # figures for a CPU run (bench/): torch's dropout and loss-head fallbacks

    @property
    def tokens(self) -> int:
        return self.seq * self.batch

    @classmethod
    def from_settings(cls, s: dict) -> "Training":
        dtype = s.get("dtype")
        if dtype not in _DTYPE_BYTES:
            raise FitError(f"--dtype {dtype!r}: expected one of auto, bfloat16, float16, float32")
        attn = s.get("attn_implementation")
        if attn not in (None, "eager", "sdpa", "flash_attention_2", "flash_attention_3", "flex_attention"):
            raise FitError(f"--attn_implementation {attn!r}: expected eager, sdpa, flash_attention_2,"
                           f" flash_attention_3 or flex_attention")
        fsdp = s.get("fsdp") or ""
        fsdp = " ".join(fsdp) if isinstance(fsdp, (list, tuple)) else str(fsdp)
        # --fsdp alone (transformers 5) or the older "full_shard auto_wrap [offload]" words
        sharded = fsdp == "True" or bool(re.search(r"full_shard|shard_grad_op|hybrid_shard", fsdp))
        config = _config(s.get("fsdp_config"))
        offload = "offload" in fsdp or config.get("cpu_offload") is True
        chosen = Strategy("your arguments", sharded=sharded, offload=sharded and offload,
                          lora=bool(s.get("use_peft")), four_bit=bool(s.get("load_in_4bit")),
                          one_reader=sharded and config.get("cpu_ram_efficient_loading") is True,
                          float_storage=(s.get("bnb_4bit_quant_storage") or "uint8") in _FLOAT_STORAGE)
        b = _DTYPE_BYTES[dtype]
        targets = s.get("lora_target_modules") or ()
        return cls(
            weight_bytes=b,
            mixed=not (s.get("bf16") is False and not s.get("fp16")),
            seq=int(s.get("max_length") or 1024),
            batch=int(s.get("per_device_train_batch_size") or 8),
            checkpointing=s.get("gradient_checkpointing") is not False,
            eager=attn == "eager",
            lora_r=int(s.get("lora_r") or 16),
            lora_targets=tuple([targets] if isinstance(targets, str) else targets),
            lora_dropout=float(s.get("lora_dropout") if s.get("lora_dropout") is not None else 0.05),
            nested_quant=bool(s.get("use_bnb_nested_quant")),
            optimizer_8bit="8bit" in str(s.get("optim") or ""),
            paged="paged" in str(s.get("optim") or ""),
            chosen=chosen,
        )


def _config(value) -> dict:
    """--fsdp_config as given: a JSON object, a JSON file, or nothing."""
    if isinstance(value, dict):
        return value
    if not value:
        return {}
    try:
        if str(value).lstrip().startswith("{"):
            return json.loads(value)
        with open(value) as fh:
            return json.load(fh)
    except (OSError, ValueError) as exc:
        raise FitError(f"--fsdp_config {value!r}: not a JSON object or JSON file ({exc})") from None


def lora_params(model: Model, training: Training) -> int:
    return sum(training.lora_r * (model.linear[t]["in"] + model.linear[t]["out"]) * model.linear[t]["count"]
               for t in lora_targets(model, training))


def lora_targets(model: Model, training: Training) -> tuple:
    targets = training.lora_targets or model.lora_default_targets or ("all-linear",)
    if "all-linear" in targets:
        return tuple(model.linear)
    unknown = [t for t in targets if t not in model.linear]
    if unknown:
        raise FitError(f"--lora_target_modules {' '.join(unknown)}: the model has no such linear layer"
                       f" (it has {', '.join(sorted(model.linear))})")
    return tuple(targets)


def with_cpu(training: Training) -> Training:
    """The same training, figured for a CPU run (bench/fit_vs_measured.py)."""
    return replace(training, cpu=True)
