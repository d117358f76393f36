"""An accelerate script as its users write it (docs/guide/frameworks.md), run by `accelerate launch`:
a tiny model, random data, `Accelerator()` reading the environment torchjob gives. `--fail-rank N`
raises on process N at step 5 (a failure on one rank, the others in a collective)."""

import argparse

import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader, TensorDataset


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--fail-rank", type=int, default=-1)
    args = p.parse_args()
    accelerator = Accelerator(cpu=True)
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    data = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=4)
    model, optimizer, data = accelerator.prepare(model, optimizer, data)
    seen = 0
    for step, (x, y) in enumerate(data):
        if accelerator.process_index == args.fail_rank and step == 5:
            raise RuntimeError(f"accelerate: injected failure on process {accelerator.process_index} at step {step}")
        loss = torch.nn.functional.mse_loss(model(x), y)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        seen += len(x)
    total = accelerator.reduce(torch.tensor(seen), reduction="sum").item()
    print(f"accelerate done: process {accelerator.process_index} of {accelerator.num_processes}, "
          f"{seen} samples here, {total} in all", flush=True)


if __name__ == "__main__":
    main()
