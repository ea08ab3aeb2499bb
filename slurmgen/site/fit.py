"""Would this model train on this layout, and how? GiB per GPU and per node, by strategy.

Pure arithmetic on the counts `python -m train.sizing` takes from the model built on the meta
device (slurmgen never imports torch) and on the training arguments' settings. The accounting,
per GPU, for N ranks, P parameters (Q of them in the linear layers a 4-bit quantization stores),
T trainable, b bytes per weight (--dtype), e bytes per activation (2: the job trains in bf16 or
fp16 on GPUs), t = sequence length x micro batch tokens, L layers of hidden size h, MLP size I:
  weights      P·b; with 4-bit: Q·q + (P−Q)·b, q = 0.5625 bytes (4 bits and an fp32 scale per
               64), 0.516 with nested quantization; LoRA adapters add T·4 (PEFT keeps them fp32)
  gradients    T·(bytes of a trainable parameter)
  optimizer    AdamW's two states in the parameter's dtype: 2·T·(its bytes); 8-bit: 2·T
  activations  L·t·(10h + 4I)·e (attention by SDPA, no s² term), with gradient checkpointing
               L·t·h·e + t·(10h + 4I)·e (one layer recomputed); logits t·V·(e + 8)
  FSDP         weights, gradients, optimizer ÷ N, plus what is gathered while computing: two
               blocks (one prefetched) and the embeddings and head: (2·block + rest)·b; with CPU
               offload only that stays on the GPU, the shards move to host memory
  other        1 GiB (CUDA context, workspaces), DDP's gradient buckets (a copy of the gradients)
               and 10% of the rest (allocator fragmentation)
Host memory per node while loading: every rank reads the whole model (n·P·b on a node of n
GPUs), under FSDP too (with cpu_ram_efficient_loading only rank 0 reads the file, but the others'
peak was not lower in bench/bench_load_once.py: kept as the bound); 4-bit loading streams checkpoint shards
(5 GiB each) to the GPU in every rank.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Optional

from slurmgen.plan.words import SpecError, parse_sizes

GIB = 1024 ** 3
SHARD_BYTES = 5 * GIB  # the largest checkpoint shard a rank holds while loading 4-bit
CONTEXT_BYTES = 1 * GIB
FRAGMENTATION = 0.10
_DTYPE_BYTES = {"float32": 4, None: 4, "bfloat16": 2, "float16": 2, "auto": 2}
FSDP_OFFLOAD_CONFIG = '{"cpu_offload": true}'


class FitError(SpecError):
    """Bad input to fit: one line, exit status 2."""


@dataclass(frozen=True)
class Strategy:
    name: str
    sharded: bool = False
    offload: bool = False
    lora: bool = False
    four_bit: bool = False

    def arguments(self, lora_r: int) -> list[str]:
        """The training arguments (TRL's, train.sft's) that select this strategy."""
        args = []
        if self.lora:
            args += ["--use_peft", "--lora_r", str(lora_r)]
        if self.four_bit:
            args += ["--load_in_4bit"]
            if self.sharded:  # FSDP flattens parameters of one dtype: 4-bit packed in bf16
                args += ["--bnb_4bit_quant_storage", "bfloat16", "--dtype", "bfloat16"]
        if self.sharded:  # FSDP2, each block its own unit (transformers' defaults)
            args += ["--fsdp", *(["--fsdp_config", FSDP_OFFLOAD_CONFIG] if self.offload else [])]
        return args


STRATEGIES = (
    Strategy("DDP"),
    Strategy("DDP + LoRA", lora=True),
    Strategy("DDP + QLoRA 4-bit", lora=True, four_bit=True),
    Strategy("FSDP full shard", sharded=True),
    Strategy("FSDP + CPU offload", sharded=True, offload=True),
    Strategy("FSDP + QLoRA", sharded=True, lora=True, four_bit=True),
)


@dataclass(frozen=True)
class Model:
    """What train.sizing counted on the meta model."""
    params: int
    quantizable_params: int
    linear: dict
    layers: int
    block_params: int
    hidden: int
    intermediate: int
    vocab: int
    model_type: str = ""
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
    activation_bytes: int = 2
    tokens: int = 1024 * 8
    checkpointing: bool = True
    lora_r: int = 16
    lora_targets: tuple = ()
    nested_quant: bool = False
    optimizer_8bit: bool = False
    chosen: Strategy = STRATEGIES[0]

    @classmethod
    def from_settings(cls, s: dict) -> "Training":
        dtype = s.get("dtype")
        if dtype not in _DTYPE_BYTES:
            raise FitError(f"--dtype {dtype!r}: expected one of auto, bfloat16, float16, float32")
        fsdp = s.get("fsdp") or ""
        fsdp = " ".join(fsdp) if isinstance(fsdp, (list, tuple)) else str(fsdp)
        # --fsdp alone (transformers 5) or the older "full_shard auto_wrap [offload]" words
        sharded = fsdp == "True" or bool(re.search(r"full_shard|shard_grad_op|hybrid_shard", fsdp))
        offload = "offload" in fsdp or _config(s.get("fsdp_config")).get("cpu_offload") is True
        chosen = Strategy("your arguments", sharded=sharded, offload=sharded and offload,
                          lora=bool(s.get("use_peft")), four_bit=bool(s.get("load_in_4bit")))
        targets = s.get("lora_target_modules") or ()
        return cls(
            weight_bytes=_DTYPE_BYTES[dtype],
            tokens=int(s.get("max_length") or 1024) * int(s.get("per_device_train_batch_size") or 8),
            checkpointing=s.get("gradient_checkpointing") is not False,
            lora_r=int(s.get("lora_r") or 16),
            lora_targets=tuple([targets] if isinstance(targets, str) else targets),
            nested_quant=bool(s.get("use_bnb_nested_quant")),
            optimizer_8bit="8bit" in str(s.get("optim") or ""),
            chosen=next((st for st in STRATEGIES if _same(st, chosen)), chosen),
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


def _same(a: Strategy, b: Strategy) -> bool:
    return (a.sharded, a.offload, a.lora, a.four_bit) == (b.sharded, b.offload, b.lora, b.four_bit)


@dataclass
class Estimate:
    strategy: str
    arguments: list[str]
    weights: float  # GiB per GPU, this and the next five
    gradients: float
    optimizer: float
    activations: float
    overhead: float  # the context, DDP's buckets, fragmentation
    total: float
    host_per_node: list[float]  # GiB per node while loading
    fits: bool = False
    why: str = ""  # what does not fit, when something does not


def lora_params(model: Model, training: Training) -> int:
    targets = training.lora_targets or model.lora_default_targets or ("all-linear",)
    if "all-linear" in targets:
        targets = tuple(model.linear)
    unknown = [t for t in targets if t not in model.linear]
    if unknown:
        raise FitError(f"--lora_target_modules {' '.join(unknown)}: the model has no such linear layer"
                       f" (it has {', '.join(sorted(model.linear))})")
    return sum(training.lora_r * (model.linear[t]["in"] + model.linear[t]["out"]) * model.linear[t]["count"]
               for t in targets)


def estimate(model: Model, training: Training, strategy: Strategy, gpus: tuple[int, ...]) -> Estimate:
    ranks, b, shards = sum(gpus), training.weight_bytes, 0.0
    q = 0.516 if training.nested_quant else 0.5625
    rest = model.params - model.quantizable_params  # embeddings, head, norms: never 4-bit
    if strategy.four_bit:
        weights = model.quantizable_params * q + rest * b
        block = model.block_params * q
    else:
        weights, block = model.params * b, model.block_params * b
    if strategy.lora:
        trainable, trainable_bytes = lora_params(model, training), 4
        weights += trainable * trainable_bytes
    else:
        trainable, trainable_bytes = model.params, b
    gradients = trainable * trainable_bytes
    buckets = 0 if strategy.sharded else gradients  # DDP all-reduces a copy of the gradients
    optimizer = 2 * trainable * (1 if training.optimizer_8bit else trainable_bytes)
    gathered = 2 * block + (model.params - model.layers * model.block_params) * b
    if strategy.sharded:
        shards = (weights + gradients + optimizer) / ranks
        weights, gradients, optimizer = weights / ranks, gradients / ranks, optimizer / ranks
        if strategy.offload:
            weights, gradients, optimizer = 0.0, 0.0, 0.0
        weights += gathered
    activations = activation_bytes(model, training)
    subtotal = weights + gradients + optimizer + activations
    overhead = CONTEXT_BYTES + buckets + FRAGMENTATION * (subtotal + buckets)
    host = [host_bytes(model, b, strategy, n, shards if strategy.offload else 0) / GIB for n in gpus]
    return Estimate(strategy.name, strategy.arguments(training.lora_r), weights / GIB, gradients / GIB,
                    optimizer / GIB, activations / GIB, overhead / GIB, (subtotal + overhead) / GIB, host)


def activation_bytes(model: Model, training: Training) -> float:
    """Per GPU: every layer's saved tensors (only its input with checkpointing, and one layer
    recomputed), and the logits with their fp32 copy and gradient."""
    e, t = training.activation_bytes, training.tokens
    per_token_layer = (10 * model.hidden + 4 * model.intermediate) * e
    if training.checkpointing:
        saved = model.layers * t * model.hidden * e + t * per_token_layer
    else:
        saved = model.layers * t * per_token_layer
    return saved + t * model.vocab * (e + 8)


def host_bytes(model: Model, weight_bytes: int, strategy: Strategy, gpus: int, offloaded: float) -> float:
    """Host memory of a node with this many GPUs while loading (and holding offloaded shards)."""
    if strategy.four_bit:  # checkpoint shards stream to the GPU, quantized there
        loading = gpus * min(SHARD_BYTES, model.params * weight_bytes)
    else:  # FSDP too: transformers 5 reads the whole checkpoint in every rank (bench_load_once)
        loading = gpus * model.params * weight_bytes
    return max(loading, gpus * offloaded)


def judge(est: Estimate, gpu_gib: tuple[float, ...], host_gib: Optional[tuple[float, ...]]) -> Estimate:
    """Fits when every node's GPUs hold the per-GPU total and (when known) every node's memory
    holds what its ranks load."""
    short = []
    smallest = min(gpu_gib)
    if est.total > smallest:
        short.append(f"{est.total:.1f} GiB per GPU > {smallest:g}")
    if host_gib:
        over = [(need, have) for need, have in zip(est.host_per_node, host_gib) if need > have]
        if over:
            need, have = max(over)
            short.append(f"{need:.0f} GiB of host memory on a node > {have:g}")
    est.fits, est.why = not short, "; ".join(short)
    return est


def preference(training: Training) -> list[Strategy]:
    """Which fitting strategy to recommend: the user's own kind of training first (all
    parameters, or adapters), each from the simplest and fastest to the most frugal."""
    full = [s for s in STRATEGIES if not s.lora]
    adapters = [s for s in STRATEGIES if s.lora]
    return adapters + full if training.chosen.lora else full + adapters


@dataclass
class Fit:
    model_name: str
    model: Model
    training: Training
    gpus: tuple[int, ...]
    gpu_gib: tuple[float, ...]
    host_gib: Optional[tuple[float, ...]]
    estimates: list[Estimate] = field(default_factory=list)
    chosen: Optional[Estimate] = None
    recommended: Optional[Estimate] = None

    @property
    def ok(self) -> bool:
        return self.recommended is not None


def assess(model_name: str, model: Model, training: Training, gpus: tuple[int, ...],
           gpu_gib: tuple[float, ...], host_gib: Optional[tuple[float, ...]]) -> Fit:
    fit = Fit(model_name, model, training, gpus, gpu_gib, host_gib)
    fit.estimates = [judge(estimate(model, training, s, gpus), gpu_gib, host_gib) for s in STRATEGIES]
    by_name = {e.strategy: e for e in fit.estimates}
    chosen = training.chosen
    fit.chosen = by_name.get(chosen.name) or judge(estimate(model, training, chosen, gpus), gpu_gib, host_gib)
    fit.recommended = next((by_name[s.name] for s in preference(training) if by_name[s.name].fits), None)
    return fit


@dataclass(frozen=True)
class Counted:
    name: str
    model: Model
    settings: dict


def count(spec) -> Counted:
    """Run train.sizing with the job's training arguments (the model built on the meta device,
    in a Python that has torch: slurmgen itself never imports it)."""
    from slurmgen.site.train_tools import run_tool

    run = run_tool("train.sizing", ["--", *spec.train_args])
    if run.missing:
        raise FitError(f"slurmgen fit counts the model's parameters with torch and transformers: {run.why}")
    if run.returncode != 0:
        raise FitError(run.why.removeprefix("error: "))
    data = json.loads(run.stdout)
    return Counted(data["settings"]["model_name_or_path"], Model.from_json(data["model"]), data["settings"])


def host_memory(spec) -> Optional[tuple[float, ...]]:
    """GiB of memory per node the job asks for (--mem, --mem-per-gpu); None when not given."""
    from slurmgen.site.check import memory_mb

    if spec.mem_per_gpu and memory_mb(spec.mem_per_gpu):
        return tuple(memory_mb(spec.mem_per_gpu) * n / 1024 for n in spec.gpus)
    if spec.mem and memory_mb(spec.mem):
        return tuple(memory_mb(spec.mem) / 1024 for _ in spec.gpus)
    return None


def assess_spec(spec) -> Fit:
    """The whole fit for a job spec with --gpu-mem: count the model, then judge every strategy."""
    counted = count(spec)
    return assess(counted.name, counted.model, Training.from_settings(counted.settings), spec.gpus,
                  parse_sizes("--gpu-mem", spec.gpu_mem, len(spec.gpus)), host_memory(spec))


