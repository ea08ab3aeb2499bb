"""Every rank's random state (python, numpy, torch, CUDA) into a checkpoint and back, for exact resume.

  * seed_all(seed): the three generators seeded at the start of a run;
  * capture()/restore(state): this process's state, a picklable dict (what train.ddp_loop saves
    per rank in trainer.pt; the HF Trainer saves its own rng_state_RANK.pth the same way);
  * gather(): every rank's state on every rank (a collective), so rank 0 alone writes them;
  * derived(*parts): a seed that depends only on its parts (seed, epoch, rank, batch number), for
    generators that must not depend on how far a process has run (a data loader's, a worker's);
  * SeededBatches: a data loader's rows fetched per batch with python, numpy and torch seeded
    from (seed, epoch, rank, batch number) inside each worker, so what a worker draws for a batch
    is the same whether the epoch ran from its start or resumed in its middle, with any number of
    workers. (Without workers the rows are fetched in the rank itself, whose state is restored.)
"""

from __future__ import annotations

import hashlib
import random
from typing import Any

STATE_KEYS = ("python", "numpy", "torch", "cuda")


def seed_all(seed: int) -> None:
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def capture() -> dict[str, Any]:
    import numpy as np
    import torch

    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore(state: dict[str, Any]) -> None:
    import numpy as np
    import torch

    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"].cpu())  # loaded with map_location=cuda it came back there
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda"]])


def gather() -> list[dict[str, Any]]:
    """Every rank's captured state, indexed by rank (one all_gather; small: a few KB per rank)."""
    from train.collectives import active_group

    mine = capture()
    dist = active_group()
    if dist is None:
        return [mine]
    everyone: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, mine)
    return everyone


def derived(*parts: int) -> int:
    """A 63-bit seed from its parts alone (not Python's hash(): that one is salted per process)."""
    digest = hashlib.sha256(repr(tuple(parts)).encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


class SeededBatches:
    """A map-style data set whose rows arrive as numbered batches (see the module's docstring).

    batches(sampler, batch_size, first) is the DataLoader's batch_sampler: lists of
    (batch number, index), numbered from ``first`` (the batches skipped at a resume keep their
    numbers). The DataLoader fetches each batch through __getitems__, which seeds the worker."""

    def __init__(self, dataset, seed: int, epoch: int, rank: int):
        self.dataset, self.key = dataset, (seed, epoch, rank)

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, key):
        return self.dataset[key[1]]

    def __getitems__(self, keys):
        from torch.utils.data import get_worker_info

        if get_worker_info() is not None:  # a worker process: its generators belong to this batch
            seed_all(derived(*self.key, keys[0][0]))
        indices = [index for _, index in keys]
        fetch = getattr(self.dataset, "__getitems__", None)
        return fetch(indices) if fetch else [self.dataset[i] for i in indices]

    @staticmethod
    def batches(sampler, batch_size: int, first: int = 0):
        from torch.utils.data import BatchSampler

        class Numbered:
            def __iter__(self):
                for n, batch in enumerate(BatchSampler(sampler, batch_size, drop_last=True), start=first):
                    yield [(n, index) for index in batch]

            def __len__(self):
                return len(sampler) // batch_size

        return Numbered()
