"""One rank's measured memory, by component, over one training step of train.sft (a worker of
bench/fit_vs_measured.py; run it under torchrun for several ranks, or --serve).

    python bench/fit_measure.py OUT_DIR -- [train.sft arguments, with --max_steps 2]
    python bench/fit_measure.py --serve    # many runs, each rank forked (bench/fit_serve.py)

torch keeps allocator statistics for CUDA only, so on CPU this counts what is live itself: a
dispatch hook sees every tensor an operation creates, keeps a weak reference to its storage,
and notes the bytes at creation and when the storage goes (FSDP2 resizes its gathered storages
in place: those calls are hooked too). Over the second step (the first one allocates the
optimizer's state) it writes OUT_DIR/rank<N>.json:

  weights     the parameters' storages this rank holds (its shards under FSDP)
  gradients   the gradients' storages, after the backward pass
  optimizer   the optimizer's state
  resident    other storages live from before the step to its end (DDP's gradient buckets)
  transient   the peak of what the step creates and frees: activations, logits, gathered
              FSDP units, their unsharded gradients, temporaries
  peak        the peak of everything counted, over the step
  rss_peak    the process's peak resident set over the step, above its floor before the model
              was loaded (with --serve: after the training stack was imported; glibc must map
              large blocks, MALLOC_MMAP_THRESHOLD_, for this to drop when tensors are freed)
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def rss_kib(field: str) -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def reset_rss_peak() -> None:
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")  # Linux: reset VmHWM to the current resident set


class Live:
    """Storages created while recording, by identity, with their bytes and an event log."""

    def __init__(self):
        self.sizes: dict[int, int] = {}
        self.refs: dict[int, object] = {}
        self.events: list[tuple[int, int]] = []  # (storage id, new size) in order
        self.recording = False

    def see(self, tensor) -> None:
        import torch

        if not isinstance(tensor, torch.Tensor) or tensor.is_meta:
            return
        local = getattr(tensor, "_local_tensor", None)  # a DTensor: its shard
        tensor = local if local is not None else tensor
        from torch.multiprocessing.reductions import StorageWeakRef

        storage = tensor.untyped_storage()
        ref = StorageWeakRef(storage)
        size = storage.nbytes()
        if self.sizes.get(ref.cdata) != size:
            self.refs[ref.cdata] = ref
            self.sizes[ref.cdata] = size
            if self.recording:
                self.events.append((ref.cdata, size))

    def sweep(self) -> None:
        for key in [k for k, ref in self.refs.items() if ref.expired()]:
            del self.refs[key]
            self.sizes.pop(key)
            if self.recording:
                self.events.append((key, 0))


def hooked(live: Live):
    """The dispatch mode that feeds `live`, and FSDP2's in-place storage resizes."""
    import torch
    from torch.distributed.fsdp._fully_shard import _fsdp_param, _fsdp_param_group
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    for module in (_fsdp_param, _fsdp_param_group):
        for name in ("alloc_storage", "free_storage"):
            original = getattr(module, name, None)
            if original is not None and not getattr(original, "_fit_hooked", False):
                def wrapper(tensor, _original=original):
                    _original(tensor)
                    live.see(tensor)
                wrapper._fit_hooked = True
                setattr(module, name, wrapper)

    class Mode(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for leaf in tree_leaves(out):
                if isinstance(leaf, torch.Tensor):
                    live.see(leaf)
            live.sweep()
            return out

    return Mode()


def storages(tensors) -> dict[int, int]:
    from torch.multiprocessing.reductions import StorageWeakRef

    found = {}
    for t in tensors:
        if t is None or t.is_meta:
            continue
        local = getattr(t, "_local_tensor", None)
        t = local if local is not None else t
        s = t.untyped_storage()
        found[StorageWeakRef(s).cdata] = s.nbytes()
    return found


def measure_callback(live: Live, out_dir: Path, rank: int, floor_kib: int):
    from transformers import TrainerCallback

    class Measure(TrainerCallback):
        """The second step is the one measured: from its start to the optimizer's step."""

        def on_step_begin(self, args, state, control, **kwargs):
            if state.global_step == 1:
                live.sweep()
                self.start = dict(live.sizes)
                live.events.clear()
                live.recording = True
                reset_rss_peak()

        def on_optimizer_step(self, args, state, control, model=None, optimizer=None, **kwargs):
            if not live.recording:
                return
            live.recording = False
            rss_peak = rss_kib("VmHWM") - floor_kib
            model = kwargs.get("model", model)
            opt = kwargs.get("optimizer", optimizer)
            params = list(model.parameters())
            weights = storages(params)
            grads = storages([p.grad for p in params])
            inner = getattr(opt, "optimizer", opt)
            opt_state = storages([v for st in inner.state.values() for v in st.values()
                                  if hasattr(v, "untyped_storage")])
            write(out_dir, rank, self.start, live.events, weights, grads, opt_state, rss_peak * 1024)

    return Measure()


def write(out_dir: Path, rank: int, start: dict, events: list, weights: dict, grads: dict, opt: dict,
          rss_peak: int) -> None:
    """Replay the step's events. A storage alive at the end is a parameter, a gradient, optimizer
    state, or resident (DDP's buckets, rebuilt during the second step); the others were freed
    within the step: the transient peak is theirs."""
    first_lasting = {}  # storage id -> index of the allocation that is still alive at the end
    sizes = dict(start)
    for i, (key, size) in enumerate(events):
        if size and not sizes.get(key):
            first_lasting[key] = i
        sizes[key] = size
    alive_at_end = {key for key, size in sizes.items() if size}

    def lasting(key, i):  # event i belongs to the allocation alive at the end (-1: from before the step)
        return key in alive_at_end and i >= first_lasting.get(key, -1)

    sizes = dict(start)
    total = sum(sizes.values())
    transient = sum(size for key, size in start.items() if not lasting(key, -1))
    peak, peak_transient = total, transient
    for i, (key, size) in enumerate(events):
        old = sizes.get(key, 0)
        sizes[key] = size
        total += size - old
        if not lasting(key, i):
            transient += size - old
        peak, peak_transient = max(peak, total), max(peak_transient, transient)
    named = set(weights) | set(grads) | set(opt)
    resident = sum(size for key, size in sizes.items() if size and key not in named)
    result = {"rank": rank, "weights": sum(weights.values()), "gradients": sum(grads.values()),
              "optimizer": sum(opt.values()), "resident": resident, "transient": peak_transient,
              "peak": peak, "rss_peak": rss_peak}
    (out_dir / f"rank{rank}.json").write_text(json.dumps(result))


def with_gpu_precision(sharded_on_cpus):
    """FSDP set up on CPUs as on GPUs: accelerate gives FSDP's plugin the mixed-precision policy
    (parameters gathered and computed in bf16) only where it sets FSDP up itself, on accelerators."""

    def wrap(trainer_class):
        base = sharded_on_cpus(trainer_class)

        class Sharded(base):
            def create_accelerator_and_postprocess(self):
                super().create_accelerator_and_postprocess()
                state = self.accelerator.state
                plugin = getattr(state, "fsdp_plugin", None)
                if plugin is not None and state.mixed_precision != "no" and plugin.mixed_precision_policy is None:
                    plugin.set_mixed_precision(state.mixed_precision)

        Sharded.__name__ = Sharded.__qualname__ = base.__name__
        return Sharded

    return wrap


def measure_rank(out_dir: Path, sft_args: list[str]) -> None:
    """This process's rank of one run, measured (torch imported: its libraries are the floor)."""
    floor = rss_kib("VmRSS")
    from torch.distributed.fsdp import CPUOffloadPolicy

    # Pinned memory needs an accelerator: on a CPU-only run the offloaded shards are plain memory.
    CPUOffloadPolicy.__init__.__defaults__ = (False,)
    from train import hf, sft

    live = Live()
    rank = int(os.environ.get("RANK", "0"))
    original = hf.train_and_finish

    def measured(trainer, denv, *args, **kwargs):
        trainer.add_callback(measure_callback(live, out_dir, rank, floor))
        for tensor in [*trainer.model.parameters(), *trainer.model.buffers()]:
            live.see(tensor)
        with hooked(live):
            return original(trainer, denv, *args, **kwargs)

    hf.train_and_finish = measured
    hf.sharded_on_cpus = with_gpu_precision(hf.sharded_on_cpus)
    sft.main(sft_args)


def main() -> None:
    if sys.argv[1:] == ["--serve"]:
        from fit_serve import serve

        serve(measure_rank)
    argv = sys.argv[1:]
    import importlib

    importlib.import_module("torch")  # torch's libraries are part of the floor
    measure_rank(Path(argv[0]), argv[argv.index("--") + 1:])
    os._exit(0)  # as train.program.exit_after: gloo's threads may abort a finalizing interpreter


if __name__ == "__main__":
    main()
