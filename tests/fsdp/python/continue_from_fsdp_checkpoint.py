"""PyTorch continues a volt fsdp run from its full checkpoint, for tests/fsdp/fsdp_pytorch_checkpoint_test.cpp.

Usage: continue_from_fsdp_checkpoint.py CHECKPOINT DATA --world N --batch-size B --steps S

  CHECKPOINT  last.ckpt of the distributed_worker's `--mode train --model mlp --optimizer adam`
              under `--strategy fsdp` (state_dict_type=full: PyTorch's names and optimizer layout)
  DATA        torch::pickle_save({"x": inputs, "y": targets}) of the worker's training samples

Reads the checkpoint the way docs/checkpoints.md says PyTorch reads it (torch.load with its
defaults), loads "state_dict" strictly into the PyTorch twin of the worker's MLP and
"optimizer_states"[0] into torch.optim.Adam, then trains S more steps in one process: each step
averages the gradients of the N ranks' batches (the batches volt's DistributedSampler without
shuffling gives rank r: samples r, r + N, ..., B at a time), as fsdp's reduce-scatter does.
Prints "STEP rank=0 step=<global step> params=<every parameter, flattened in order, %.17g>"
after every step; exits non-zero, saying why, when something does not load.
"""
import argparse
import sys

import torch
from torch import nn


class RegressionMLP(nn.Module):
    """The twin of tests/support/regression_problem.cpp's RegressionModule with hidden=4."""

    def __init__(self, features=8, hidden=4):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(features, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh())
        self.linear = nn.Linear(hidden, 1)

    def forward(self, x):
        return self.linear(self.body(x))


def fail(what):
    print("FAIL " + what, flush=True)
    sys.exit(1)


def rank_batch(samples, world, rank, batch_size, batch_index):
    """The samples of `rank`'s batch `batch_index`: DistributedSampler(shuffle=False) order."""
    mine = list(range(rank, samples, world))
    return mine[batch_index * batch_size:(batch_index + 1) * batch_size]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("checkpoint")
    parser.add_argument("data")
    parser.add_argument("--world", type=int, required=True)
    parser.add_argument("--batch-size", type=int, required=True)
    parser.add_argument("--steps", type=int, required=True)
    args = parser.parse_args()
    torch.set_num_threads(1)

    # The test's own file (a typed dict from torch::pickle_save): not weights-only.
    data = torch.load(args.data, weights_only=False)
    x, y = data["x"], data["y"]
    samples = x.shape[0]
    if samples % args.world or (samples // args.world) % args.batch_size:
        fail("the test expects whole batches: %d samples, %d ranks, batch %d" % (samples, args.world, args.batch_size))
    batches_per_epoch = samples // args.world // args.batch_size

    # volt's checkpoint with torch.load's defaults (weights_only=True on PyTorch 2.6+).
    ckpt = torch.load(args.checkpoint)
    model = RegressionMLP()
    model.load_state_dict(ckpt["state_dict"])  # strict: every name and shape
    # torch.load keeps tensors that share a storage sharing it, and Adam advances state["step"] in
    # place: one step tensor for several parameters would count each step several times.
    saved_steps = [s["step"] for s in ckpt["optimizer_states"][0]["state"].values() if torch.is_tensor(s["step"])]
    if len({t.data_ptr() for t in saved_steps}) != len(saved_steps):
        fail("the optimizer state's %d 'step' tensors share storage: %d distinct" %
             (len(saved_steps), len({t.data_ptr() for t in saved_steps})))
    optimizer = torch.optim.Adam(model.parameters(), lr=1.0)
    try:
        optimizer.load_state_dict(ckpt["optimizer_states"][0])
    except Exception as e:  # say which part of the layout PyTorch refused
        fail("torch.optim.Adam.load_state_dict: %s: %s" % (type(e).__name__, e))
    group = optimizer.param_groups[0]
    if group["lr"] != 0.01:
        fail("the checkpoint's lr is %r, the worker's Adam has 0.01" % group["lr"])
    step_counts = {float(state["step"]) for state in optimizer.state.values()}
    global_step = ckpt["global_step"]
    if len(optimizer.state) != len(list(model.parameters())) or step_counts != {float(global_step)}:
        fail("Adam state for %d of %d parameters, steps %s, global_step %d" %
             (len(optimizer.state), len(list(model.parameters())), sorted(step_counts), global_step))
    print("ok   loaded: global_step %d, Adam state of %d parameters" % (global_step, len(optimizer.state)), flush=True)

    for step in range(global_step + 1, global_step + 1 + args.steps):
        batch_index = (step - 1) % batches_per_epoch
        optimizer.zero_grad()
        # Each rank's mean loss, backward one after the other: the gradients add up, and /world is
        # the average fsdp's reduce-scatter takes over the ranks.
        for rank in range(args.world):
            rows = rank_batch(samples, args.world, rank, args.batch_size, batch_index)
            loss = ((model(x[rows]) - y[rows]) ** 2).mean()
            loss.backward()
        for p in model.parameters():
            p.grad.div_(args.world)
        optimizer.step()
        flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
        print("STEP rank=0 step=%d params=%s" % (step, ",".join("%.17g" % v for v in flat.tolist())), flush=True)


if __name__ == "__main__":
    main()
