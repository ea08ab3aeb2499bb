"""A user's own Lightning script (it imports nothing of slurmgen's but the strategy, and only when
asked for it): a linear regression on N numbered samples. Every rank notes the sample indices it
trained on in each epoch; rank 0 gathers them all and writes to OUT what the job saw:

    python lightning_samples.py OUT [--uneven] [--devices D --nodes N] [--epochs E]

--uneven: train.lightning's UnevenDDPStrategy (devices 'auto'); otherwise Lightning's own "ddp"
with the devices and nodes given, as on a uniform layout.
"""
import argparse
import json
import os

import lightning as L
import torch
from torch.utils.data import DataLoader, Dataset

SAMPLES = 48
FEATURES = 8


class Numbered(Dataset):
    """Sample i: its index, x_i and y_i = x_i . (1..8), the same in every rank."""

    def __init__(self):
        self.x = torch.randn(SAMPLES, FEATURES, generator=torch.Generator().manual_seed(0))
        self.y = self.x @ torch.arange(1.0, FEATURES + 1)

    def __len__(self):
        return SAMPLES

    def __getitem__(self, i):
        return i, self.x[i], self.y[i]


class Regression(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(FEATURES, 1)
        self.seen, self.losses, self.epochs = [], [], []

    def training_step(self, batch, batch_idx):
        index, x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x).squeeze(-1), y)
        self.seen += index.tolist()
        self.losses.append(loss.item())
        return loss

    def on_train_epoch_end(self):
        # Every rank has as many indices (the sampler pads to equal shares): a plain all_gather.
        seen = self.all_gather(torch.tensor(self.seen)).reshape(-1).tolist()
        loss = self.all_gather(torch.tensor(sum(self.losses) / len(self.losses))).mean().item()
        self.epochs.append({"seen": seen, "loss": loss})
        self.seen, self.losses = [], []

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--uneven", action="store_true")
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--nodes", type=int, default=1)
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args()
    if args.uneven:
        from train.lightning import UnevenDDPStrategy

        setup = {"strategy": UnevenDDPStrategy(), "devices": "auto"}
    else:
        setup = {"strategy": "ddp", "devices": args.devices, "num_nodes": args.nodes}
    model = Regression()
    trainer = L.Trainer(accelerator="cpu", max_epochs=args.epochs, logger=False, enable_progress_bar=False,
                        enable_model_summary=False, default_root_dir=os.path.dirname(os.path.abspath(args.out)),
                        **setup)
    trainer.fit(model, DataLoader(Numbered(), batch_size=2))
    where = {"rank": trainer.global_rank, "local_rank": trainer.local_rank, "node_rank": trainer.node_rank}
    ranks = [None] * trainer.world_size
    torch.distributed.all_gather_object(ranks, where)
    if trainer.is_global_zero:
        with open(args.out, "w") as fh:
            json.dump({"world_size": trainer.world_size, "processes": torch.distributed.get_world_size(),
                       "ranks": ranks, "epochs": model.epochs}, fh)


if __name__ == "__main__":
    main()
