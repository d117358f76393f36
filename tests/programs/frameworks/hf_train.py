"""A Hugging Face transformers `Trainer` script as its users write it (docs/guide/frameworks.md): a
tiny GPT-2 built from a config (no download), random tokens, the Trainer's defaults for distributed
training (it reads the environment torchrun or torchjob gives). `--fail-rank N` raises on global rank
N at step 5 (a failure on one rank, the others in a collective)."""

import argparse
import tempfile

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments


class FailOn(TrainerCallback):
    def __init__(self, rank: int) -> None:
        self.rank = rank

    def on_step_end(self, args, state, control, **kwargs):
        if args.process_index == self.rank and state.global_step == 5:
            raise RuntimeError(f"transformers: injected failure on global rank {args.process_index} "
                               f"at step {state.global_step}")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--fail-rank", type=int, default=-1)
    p.add_argument("--steps", type=int, default=20)
    args = p.parse_args()
    torch.manual_seed(0)
    print(f"threads {torch.get_num_threads()}", flush=True)  # OMP_NUM_THREADS, where set
    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=64, n_positions=16))
    data = [{"input_ids": ids, "labels": ids} for ids in torch.randint(0, 64, (64, 16))]
    training = TrainingArguments(output_dir=tempfile.mkdtemp(), max_steps=args.steps, per_device_train_batch_size=4,
                                 logging_steps=5, save_strategy="no", use_cpu=True,
                                 disable_tqdm=False)
    trainer = Trainer(model=model, args=training, train_dataset=data, callbacks=[FailOn(args.fail_rank)])
    trainer.train()
    print(f"transformers done: rank {training.process_index} of {training.world_size}, "
          f"{trainer.state.global_step} steps", flush=True)


if __name__ == "__main__":
    main()
