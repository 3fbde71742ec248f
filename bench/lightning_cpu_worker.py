# The Python side of bench/lightning_cpu: one whole PyTorch Lightning run, for the C++ program to
# time against volt's Trainer doing the same: one epoch of Fashion-MNIST's training set (all 60,000
# images, in memory, normalized as the main job normalizes them), batch B per process, shuffled,
# AdamW (lr 1e-4, weight decay 0.01), the same initial weights as volt's side (initialise() of
# bench/trainer_vs_lightning_worker.py, which also defines the CNN). Runs under PyTorch 2.11 and
# Lightning from the project-local prefixes (tools/setup_lightning.sh):
#
#   OMP_NUM_THREADS=T PYTHONPATH=.deps/pytorch2:.deps/lightning /usr/bin/python3 bench/lightning_cpu_worker.py \
#       --model {mlp,cnn} --processes N --mode {barebones,default} --threads T --root DIR --result FILE \
#       [--warmup W] [--limit-batches L] [--data-dir D] [--batch B] [--adamw {default,fused}]
#
# N > 1 is Lightning's strategy="ddp" on N CPU processes (its launcher runs this script again for
# ranks 1..N-1). The mode is Trainer(barebones=True), or Lightning's defaults with train_loss logged
# on every step (progress bar, logger, checkpoint at the epoch's end, model summary). Global rank 0
# writes one line to FILE:
#
#   step_ms <median ms> steps <steps run> init_sum <%.9e> final_loss <%.6e> mean_loss <%.6e> threads <n>
#
# step_ms is the median over steps W .. n-2 of the time from the end of the step before to the end
# of the step (the batch's fetch, the hooks, logging and the progress bar included; the last step,
# the epoch's remainder, left out): the rule of volt's side. final_loss is the last step's loss,
# mean_loss the mean over rank 0's steps, threads torch.get_num_threads(). Everything else goes to
# stdout/stderr.
import argparse
import gzip
import os
import struct
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

from trainer_vs_lightning_worker import CNN, initialise

# The training set's pixel statistics, as examples/fashion_mnist/fashion_mnist_data.cpp has them.
MEAN, STD = 0.2860, 0.3530
SEED = 42


def parse_args():
    parser = argparse.ArgumentParser(description="The Python side of bench/lightning_cpu.")
    parser.add_argument("--model", required=True, choices=("mlp", "cnn"))
    parser.add_argument("--processes", required=True, type=int, help="1, or N > 1 for DDP")
    parser.add_argument("--mode", required=True, choices=("barebones", "default"))
    parser.add_argument("--threads", required=True, type=int, help="torch.set_num_threads in every process")
    parser.add_argument("--root", required=True, help="Lightning's default_root_dir")
    parser.add_argument("--result", required=True, help="rank 0 writes its measurement here")
    parser.add_argument("--warmup", type=int, default=5, help="steps left out of the median")
    parser.add_argument("--limit-batches", type=int, default=0, help="batches per process (0: the epoch)")
    parser.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--adamw", choices=("default", "fused"), default="default")
    args = parser.parse_args()
    if args.processes < 1 or args.threads < 1 or args.warmup < 0 or args.limit_batches < 0 or args.batch < 1:
        parser.error("--processes, --threads and --batch must be >= 1, --warmup and --limit-batches >= 0")
    return args


class MLP(nn.Module):
    """784 -> 128 -> 10 on flattened images; parameter names net.1.*, net.3.* as volt's SmallMlp."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10))

    def forward(self, x):
        return self.net(x)


def read_idx(path):
    """An IDX file of unsigned bytes (gzip-compressed or not) as a uint8 tensor of its sizes."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    magic = struct.unpack(">I", data[:4])[0]
    dims = magic & 0xFF
    if magic >> 8 != 0x08 or not 1 <= dims <= 4:
        raise ValueError(f"{path} is not an IDX file of unsigned bytes")
    sizes = struct.unpack(">" + "I" * dims, data[4:4 + 4 * dims])
    return torch.frombuffer(bytearray(data[4 + 4 * dims:]), dtype=torch.uint8).view(*sizes)


class InMemory(torch.utils.data.Dataset):
    """Images and labels held as two tensors. The DataLoader's fetcher hands a batch's indices to
    __getitems__, which gathers the batch at once (as volt's TensorDataset does) instead of the
    default: indexing sample by sample and stacking the samples in collate."""

    def __init__(self, data_dir):
        images = read_idx(os.path.join(data_dir, "train-images-idx3-ubyte.gz"))
        labels = read_idx(os.path.join(data_dir, "train-labels-idx1-ubyte.gz"))
        self.x = images.float().div_(255.0).sub_(MEAN).div_(STD).unsqueeze(1).contiguous()
        self.y = labels.long()

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return self.x[i], self.y[i]

    def __getitems__(self, indices):
        index = torch.tensor(indices)
        return self.x.index_select(0, index), self.y.index_select(0, index)


def keep_batch(batch):
    """The collate function: __getitems__ already returns the batch."""
    return batch


def median(values):
    values = sorted(values)
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else 0.5 * (values[mid - 1] + values[mid])


def median_step_ms(ends, warmup):
    steps = [(ends[i] - ends[i - 1]) * 1e3 for i in range(max(warmup, 1), len(ends) - 1)]
    if not steps:
        raise RuntimeError(f"{len(ends)} steps ran, too few to time after {warmup} warm-up steps")
    return median(steps)


def main():
    args = parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(SEED)
    import pytorch_lightning as pl

    class Data(pl.LightningDataModule):
        """Reads the training set in setup, on every process (after Lightning started them)."""

        def setup(self, stage):
            self.train = InMemory(args.data_dir)

        def train_dataloader(self):
            return torch.utils.data.DataLoader(self.train, batch_size=args.batch, shuffle=True, collate_fn=keep_batch)

    class Module(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = CNN() if args.model == "cnn" else MLP()

        def training_step(self, batch, batch_idx):
            x, y = batch
            loss = F.cross_entropy(self.net(x), y)
            if args.mode == "default":  # barebones=True allows no self.log
                self.log("train_loss", loss, prog_bar=True)
            return loss

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=1e-4, weight_decay=0.01,
                                     **({"fused": True} if args.adamw == "fused" else {}))

    class StepEnds(pl.Callback):
        def __init__(self):
            self.ends, self.losses = [], []

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            self.ends.append(time.perf_counter())
            self.losses.append(outputs["loss"].detach())  # read after the fit, not in the step

    module = Module()
    init_sum = initialise(module.net)  # names as volt's side sees them: the model's own
    ends = StepEnds()
    settings = dict(accelerator="cpu", devices=args.processes, max_epochs=1, default_root_dir=args.root,
                    callbacks=[ends], strategy="ddp" if args.processes > 1 else "auto")
    if args.limit_batches > 0:
        settings["limit_train_batches"] = args.limit_batches
    if args.mode == "barebones":
        settings["barebones"] = True
    trainer = pl.Trainer(**settings)
    trainer.fit(module, datamodule=Data())
    if trainer.global_rank == 0:
        with open(args.result, "w") as out:
            out.write(f"step_ms {median_step_ms(ends.ends, args.warmup):.4f} steps {len(ends.ends)}"
                      f" init_sum {init_sum:.9e} final_loss {float(ends.losses[-1]):.6e}"
                      f" mean_loss {float(torch.stack(ends.losses).mean()):.6e}"
                      f" threads {torch.get_num_threads()}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
