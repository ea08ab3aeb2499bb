"""How much memory, by component, per GPU and per node: the arithmetic of `slurmgen fit`.

Pure arithmetic on the model's counts and the training arguments' settings (fit_model). Every
component is checked against a measurement (bench/fit_vs_measured.py, tests/test_fit_measured.py)
and the totals against published runs (tests/test_fit_published.py). Per GPU, for N ranks, P
parameters (Q of them in the linear layers a 4-bit quantization stores), T trainable, b bytes per
weight (--dtype):

  weights      P·b. Under FSDP with mixed precision (bf16/fp16, the default on GPUs) accelerate
               keeps fp32 master weights: every trainable parameter is upcast to 4 bytes before
               it is sharded. 4-bit: Q·0.5 packed, Q·(4/64) fp32 scales (Q·0.0159 nested), the
               rest at b; LoRA adapters T·4 (PEFT keeps them fp32).
  gradients    T·(bytes of a trainable parameter)
  optimizer    AdamW's two states in the parameter's dtype: 2·T·(its bytes); 8-bit: 2·T; a paged
               optimizer's state is counted in host memory (unified memory spills, never OOMs)
  FSDP         weights, gradients and optimizer ÷ N (4-bit scales are not parameters: every rank
               holds them all), plus what is gathered while computing (passing_bytes): a block
               and the next, and training every parameter the block's unsharded gradients on
               their way through the reduce-scatter; or the LM head, which TRL's fused head
               gathers whole. CPU offload moves the shards to host memory.
  activations  per layer and token, what autograd keeps (layer_bytes); with gradient
               checkpointing only each layer's input and one layer recomputed; and TRL's fused LM
               head, which never holds the logits: tiles of 4096 tokens x 32768 columns
  other        1 GiB (CUDA context, workspaces), DDP's gradient buckets (a copy of the gradients;
               none on one GPU, which trains without DDP) and 10% of the rest (fragmentation)
  total        weights, optimizer state and the larger of the gradients (with FSDP's per-block
               buffers) and what a step holds in passing (activations, gathered units): the
               backward pass frees each layer's activations as its gradients arrive; with the
               context, buckets and fragmentation
  loading      4-bit weights are quantized on the rank's own GPU as they load: each GPU holds the
               whole quantized model before FSDP shards it
Host memory per node while loading: each rank reads the whole model, a checkpoint shard (up to
5 GiB) at a time (then upcast to fp32 under
FSDP with mixed precision), one reader per node with cpu_ram_efficient_loading; 4-bit loading
streams 5 GiB checkpoint shards; with CPU offload, the larger of the copy read with the node's
weight shards, and the node's offloaded weights, gradients and optimizer state.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from slurmgen.site.fit_model import Model, Strategy, Training, lora_params, lora_targets, shown_name

GIB = 1024 ** 3
SHARD_BYTES = 5 * GIB  # the largest checkpoint shard a rank holds while loading 4-bit
CONTEXT_BYTES = 1 * GIB
FRAGMENTATION = 0.10
PACKED, SCALES, NESTED_SCALES = 0.5, 4 / 64, 1 / 64 + 4 / (64 * 256)  # bytes per 4-bit weight
HEAD_TOKENS, HEAD_COLUMNS = 4096, 32768  # TRL's fused LM head (trl.kernels.chunked_logprob) tiles


@dataclass
class Estimate:
    strategy: str
    arguments: list[str]
    weights: float  # GiB per GPU, this and the next five: resident shards and gathered units
    gradients: float
    optimizer: float
    activations: float
    overhead: float  # the context, DDP's buckets, fragmentation
    total: float  # the most a GPU holds: training, or loading where that is more
    host_per_node: list[float]  # GiB per node while loading (and holding offloaded shards)
    gathered: float = 0.0  # of weights: FSDP units gathered while computing
    buckets: float = 0.0  # of overhead: DDP's gradient buckets
    offloaded: float = 0.0  # GiB per rank in host memory (CPU offload): weights, gradients, optimizer
    loading: float = 0.0  # GiB per GPU while loading (4-bit)
    train_total: float = 0.0  # GiB per GPU while training (total is the larger of this and loading)
    parts: dict = field(default_factory=dict)  # GiB per rank by component, wherever held (bench/)
    fits: bool = False  # no budget that was checked is exceeded
    host_checked: bool = False  # host memory was known for every node
    why: str = ""  # what does not fit, when something does not


@dataclass(frozen=True)
class State:
    """What a rank keeps from step to step, in bytes: its weights (every_rank of them held whole
    by every rank), gradients and optimizer state, wherever they live."""
    weights: float
    every_rank: float
    gradients: float
    optimizer: float
    trainable: int
    tb: int  # bytes of a trainable parameter
    upcast: bool  # accelerate's fp32 master weights


def state(model: Model, training: Training, strategy: Strategy, ranks: int) -> State:
    # FSDP under mixed precision: accelerate upcasts what trains in full to fp32 before sharding
    upcast = (strategy.sharded and training.mixed and not strategy.four_bit and not strategy.lora
              and training.weight_bytes < 4)
    trainable = lora_params(model, training) if strategy.lora else model.params
    tb = 4 if strategy.lora or upcast else training.weight_bytes
    held, every_rank = held_weights(model, training, strategy, trainable, tb)
    share = ranks if strategy.sharded else 1
    optimizer = 2 * trainable * (1 if training.optimizer_8bit else tb) / share
    return State(held / share + every_rank, every_rank, trainable * tb / share, optimizer, trainable, tb, upcast)


def estimate(model: Model, training: Training, strategy: Strategy, gpus: tuple[int, ...]) -> Estimate:
    if strategy.weight_bytes:
        training = replace(training, weight_bytes=strategy.weight_bytes)
    ranks = sum(gpus)
    st = state(model, training, strategy, ranks)
    shard = st.weights - st.every_rank
    # CPU offload moves the shards to host memory; a paged optimizer's state pages out there
    offloaded = shard + st.gradients + st.optimizer if strategy.offload else \
        st.optimizer if training.paged else 0.0
    optimizer_on_gpu = 0.0 if strategy.offload or training.paged else st.optimizer
    activations, gathered, buffers = passing_bytes(model, training, strategy, st.tb, ranks)
    buckets = st.trainable * st.tb if not strategy.sharded and ranks > 1 else 0.0
    # A step never holds its gradients and its activations at once: the backward pass frees
    # each layer's activations as its gradients arrive, while FSDP's per-block buffers stay
    # (bench/fit_vs_measured.py: the peak within 5%).
    passing = gathered + activations
    on_gpu = st.every_rank + passing if strategy.offload else \
        st.weights + optimizer_on_gpu + max(st.gradients + buffers, passing)
    overhead = CONTEXT_BYTES + buckets + FRAGMENTATION * (on_gpu + buckets)
    loading = (quantized_bytes(model, training) + CONTEXT_BYTES) * (1 + FRAGMENTATION) if strategy.four_bit else 0.0
    held = (shard if strategy.offload else 0.0, offloaded)
    host = [host_bytes(model, training, strategy, n, held, st.upcast, st.trainable) / GIB for n in gpus]
    on = (lambda v: 0.0) if strategy.offload else (lambda v: v)
    parts = {"weights": st.weights, "gradients": st.gradients, "optimizer": st.optimizer, "gathered": gathered,
             "activations": activations, "buckets": buckets, "fsdp_buffers": buffers}
    return Estimate(shown_name(strategy, ranks), strategy.arguments(training.lora_r),
                    (on(shard) + st.every_rank + gathered) / GIB, on(st.gradients) / GIB, optimizer_on_gpu / GIB,
                    activations / GIB, overhead / GIB, max(on_gpu + overhead, loading) / GIB, host,
                    gathered=gathered / GIB, buckets=buckets / GIB, offloaded=offloaded / GIB, loading=loading / GIB,
                    train_total=(on_gpu + overhead) / GIB, parts={k: v / GIB for k, v in parts.items()})


def quantized_bytes(model: Model, training: Training) -> float:
    """The whole model, 4-bit: packed weights, their scales, the rest (embeddings, head, norms) at b."""
    scales = NESTED_SCALES if training.nested_quant else SCALES
    rest = model.params - model.quantizable_params
    return model.quantizable_params * (PACKED + scales) + rest * training.weight_bytes


def held_weights(model: Model, training: Training, strategy: Strategy, trainable: int, tb: int) -> tuple:
    """(bytes FSDP would shard, bytes every rank holds whole). 4-bit scales are attributes, not
    parameters; packed weights in an integer dtype are left out of FSDP's sharding."""
    b = training.weight_bytes
    if strategy.four_bit:
        scales = NESTED_SCALES if training.nested_quant else SCALES
        packed = model.quantizable_params * PACKED
        rest = (model.params - model.quantizable_params) * b + trainable * 4
        if strategy.sharded and not strategy.float_storage:
            return rest, packed + model.quantizable_params * scales
        return packed + rest, model.quantizable_params * scales
    if strategy.lora:
        return model.params * b + trainable * 4, 0.0
    return model.params * tb, 0.0


def layer_bytes(model: Model, training: Training, strategy: Strategy, e: int) -> float:
    """Bytes one decoder layer keeps for the backward pass, per token (what autograd saves):
    norms (an fp32 copy of their input when computing in 16 bits, their normalized output where
    the norm's weight trains), the inputs of linear layers whose weights train, attention's q,
    k, v and output (eager: k and v repeated per head, and the probabilities, fp32 and their
    16-bit copy), the MLP's activations, and LoRA's fp32 inputs, dropout masks and rank-r outputs."""
    h, inter, full = model.hidden, model.intermediate, not strategy.lora
    q_width = model.heads * (model.head_dim or h // model.heads)
    kv_width = model.kv_heads * (model.head_dim or h // model.heads)
    norm_in = 4 if e == 2 else e
    saved = model.norms * h * (norm_in + (e if full else 0))
    if training.eager:
        probs = model.heads * training.seq * (4 + (2 if e == 2 else 0))
        saved += 3 * q_width * e + probs + (q_width * e if full else 0)  # o_proj's input: a contiguous copy
    else:
        saved += (2 * q_width + 2 * kv_width) * e  # q, k, v and the output (o_proj's input is a view of it)
    saved += (3 * inter if model.gated else inter) * e
    if full:
        saved += (2 * h + inter) * e  # the inputs of the attention's and the MLP's linear layers
    if strategy.lora:
        mask = (4 if training.cpu else 1) if training.lora_dropout > 0 else 0  # of the fp32 input
        for target in lora_targets(model, training):
            per_layer = model.linear[target]["count"] / model.layers
            saved += per_layer * (model.linear[target]["in"] * (4 + mask) + training.lora_r * 4)
    return saved + model.norms * 4 + model.heads * 4  # each norm's 1/rms, attention's log-sum-exp


def head_bytes(model: Model, training: Training, strategy: Strategy, e: int, tb: int) -> float:
    """TRL's fused LM head at its peak, in the backward pass: the hidden states it saved, a tile
    of 4096 tokens x 32768 columns, the fp32 gradients of the hidden states and (training it) of
    the head; on a CPU torch's fallback of the Triton kernel adds four fp32 and a bool per tile
    element."""
    t, h, vocab = training.tokens, model.hidden, model.vocab
    c = 2 if training.mixed else e
    rows = min(t, HEAD_TOKENS)
    total = t * h * e + t * 12 + rows * HEAD_COLUMNS * c + t * h * 4
    if not strategy.lora:
        total += vocab * h * 4 + (vocab * h * tb if tb != 4 else 0)
    if training.cpu:
        total += rows * min(vocab, HEAD_COLUMNS) * 17
    return total


def passing_bytes(model: Model, training: Training, strategy: Strategy, tb: int, ranks: int) -> tuple:
    """(activations, gathered, buffers): what a step holds in passing at its peak, per GPU, and
    FSDP's per-block buffers, which stay while the sharded gradients build up. Activations:
    every layer's saved tensors (with gradient checkpointing only each layer's input) while the
    head's backward runs, or, with checkpointing, a layer recomputed. FSDP adds its gathered
    units at whichever moment is larger: the head's backward, with the LM head that TRL's fused
    head gathers whole (in its master dtype), or a block's backward, with the block, its unsharded
    gradients, the reduce-scatter input they are copied into, its output and that output's fp32
    copy. On GPUs the next block is gathered
    meanwhile, on its own CUDA stream; a CPU run (bench/) has no streams."""
    e = 2 if training.weight_bytes == 2 or (training.mixed and strategy.sharded) else 4
    t, h = training.tokens, model.hidden
    per_layer = t * layer_bytes(model, training, strategy, e)
    final = t * h * ((4 if e == 2 else e) + (0 if strategy.lora else e))
    head_phase = final + head_bytes(model, training, strategy, e, tb)
    if training.checkpointing:
        kept, recompute = model.layers * t * h * e, per_layer + t * (h + model.intermediate) * 4
    else:
        kept, recompute = model.layers * per_layer, 0
    activations = kept + max(head_phase, recompute)
    if not strategy.sharded:
        return activations, 0.0, 0.0
    c = 2 if training.mixed else training.weight_bytes
    b = training.weight_bytes
    if strategy.four_bit:
        quant = model.quantizable_params / model.layers
        block = quant * PACKED + (model.block_params - quant) * b
    else:
        block = model.block_params * c
    if strategy.lora:
        block += lora_params(model, training) / model.layers * c
    following = 0 if training.cpu else block
    grads = 0 if strategy.lora else model.block_params * (c * (2 + 1 / ranks) + (4 / ranks if tb == 4 else 0))
    head = model.vocab * h * (b if strategy.lora else tb)
    at_head = kept + head_phase + head + following
    # at a block's reduce-scatter: the last layer's activations are freed; with checkpointing,
    # the recomputation's forward hooks have gathered one more block
    buffers = block * (2 if training.checkpointing else 1) + following + grads
    at_block = kept - (0 if training.checkpointing else per_layer) + buffers
    at_recompute = kept + recompute + block + following
    return activations, max(at_head, at_block, at_recompute) - activations, buffers


def host_bytes(model: Model, training: Training, strategy: Strategy, gpus: int, offloaded: tuple,
               upcast: bool, trainable: int) -> float:
    """Host memory of a node with this many GPUs: while loading (each reader's copy and the
    checkpoint shard in transit, and with CPU
    offload the weight shards filled in from it), or training (the offloaded weights, gradients
    and optimizer state of the node's ranks), whichever is more. offloaded: (weights, all) per rank."""
    b = training.weight_bytes
    if strategy.four_bit:  # checkpoint shards stream to the GPU, quantized there, in every rank
        copy, readers = min(SHARD_BYTES, model.params * b), gpus
    else:
        # the model, and the checkpoint shard it is being filled from (up to 5 GiB); then accelerate
        # upcasts what trains in full to fp32 on the CPU, before sharding
        loaded = model.params * b + (trainable * 4 if strategy.lora else 0) + min(SHARD_BYTES, model.params * b)
        copy = max(loaded, model.params * 4) if upcast else loaded
        readers = 1 if strategy.sharded and strategy.one_reader else gpus
    weights, everything = offloaded
    return max(readers * copy + gpus * weights, gpus * everything)


