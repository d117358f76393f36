"""A PyTorch Lightning script as its users write it (docs/guide/frameworks.md): a tiny model, random
data, the Trainer's defaults for the strategy (it reads the environment torchrun or torchjob gives).
`--fail-rank N` raises on global rank N at step 5, or `--fail-step` (a failure on one rank, the others in a
collective)."""

import argparse
import os

import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset


class Tiny(L.LightningModule):
    def __init__(self, fail_rank: int, fail_step: int) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(8, 1)
        self.fail_rank, self.fail_step = fail_rank, fail_step

    def training_step(self, batch, batch_idx):
        if self.global_rank == self.fail_rank and batch_idx == self.fail_step:
            raise RuntimeError(f"lightning: injected failure on global rank {self.global_rank} at step {batch_idx}")
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--fail-rank", type=int, default=-1)
    p.add_argument("--fail-step", type=int, default=5)
    args = p.parse_args()
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
    per_node = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))  # processes on this node, and nodes: torchrun's
    nodes = int(os.environ.get("WORLD_SIZE", "1")) // per_node
    trainer = L.Trainer(accelerator="cpu", devices=per_node, num_nodes=nodes, max_epochs=1, logger=False,
                        enable_checkpointing=False, enable_model_summary=False)
    trainer.fit(Tiny(args.fail_rank, args.fail_step), DataLoader(data, batch_size=4))
    print(f"lightning done: global rank {trainer.global_rank} of {trainer.world_size}, "
          f"{trainer.global_step} steps", flush=True)


if __name__ == "__main__":
    main()
