"""PyTorch's ZeroRedundancyOptimizer on a small MLP, for tests/sharded/zero_parity_test.cpp.

Every rank (a process on Gloo over 127.0.0.1) computes its batch's gradients, averages them like
DDP (all_gather, summed in rank order, divided by the world size: the same float operations on
both sides), and steps ZeroRedundancyOptimizer. Rank 0 prints one line per step:
"STEP step=<s> params=<every parameter's values, flattened in order, %.17g>".
The C++ test builds the same model, data and optimizer from the same seeds with volt::OSS.
"""
import argparse
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.optim import ZeroRedundancyOptimizer

SHAPES = [(32, 16), (32,), (16, 32), (16,), (4, 16), (4,)]


def make_params():
    generator = torch.Generator().manual_seed(7)
    return [(torch.randn(shape, generator=generator) * 0.3).requires_grad_(True) for shape in SHAPES]


def batch(step, rank):
    generator = torch.Generator().manual_seed(1000 + 10 * step + rank)
    x = torch.randn(8, 16, generator=generator)
    y = torch.randn(8, 4, generator=generator)
    return x, y


def forward(params, x):
    w1, b1, w2, b2, w3, b3 = params
    h = torch.tanh(torch.nn.functional.linear(x, w1, b1))
    h = torch.tanh(torch.nn.functional.linear(h, w2, b2))
    return torch.nn.functional.linear(h, w3, b3)


def run(rank, world, port, optimizer, steps):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.set_num_threads(1)
    params = make_params()
    if optimizer == "adam":
        zero = ZeroRedundancyOptimizer(params, optimizer_class=torch.optim.Adam, lr=0.01, weight_decay=0.01)
    else:
        zero = ZeroRedundancyOptimizer(params, optimizer_class=torch.optim.SGD, lr=0.1, momentum=0.9)
    for step in range(steps):
        x, y = batch(step, rank)
        loss = ((forward(params, x) - y) ** 2).mean()
        zero.zero_grad()
        loss.backward()
        for p in params:
            gathered = [torch.empty_like(p.grad) for _ in range(world)]
            dist.all_gather(gathered, p.grad)
            total = gathered[0].clone()
            for other in gathered[1:]:
                total += other
            p.grad.copy_(total / world)
        zero.step()
        if rank == 0:
            flat = torch.cat([p.detach().reshape(-1) for p in params])
            print("STEP step=%d params=%s" % (step, ",".join("%.17g" % v for v in flat.tolist())), flush=True)
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--world", type=int, default=2)
    parser.add_argument("--optimizer", choices=["momentum", "adam"], default="adam")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    mp.spawn(run, args=(args.world, args.port, args.optimizer, args.steps), nprocs=args.world, join=True)


if __name__ == "__main__":
    sys.exit(main())
