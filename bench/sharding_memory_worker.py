# PyTorch's DDP + ZeroRedundancyOptimizer(Adam) on bench/sharding_memory.cpp's MLP, for its
# "torch ZeRO" rows. Run by Debian's /usr/bin/python3 (python3-torch 1.13); starts WORLD ranks
# (processes over Gloo on 127.0.0.1, one thread each), each printing the same RANK line as volt's
# workers: median ms per step (interval between step ends after warm-up) and bytes counted from
# live tensors (parameters, gradients before the step, DDP's bucket buffers are not reachable from
# Python and are reported as 0, the local Adam state) and peak RSS.
#
#   python3 sharding_memory_worker.py WORLD PORT STEPS WARMUP
import resource
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel

WIDTHS = [912] * 13 + [10]
BATCH = 32


def storage_bytes(tensors):
    seen, total = set(), 0
    for t in tensors:
        if t is None:
            continue
        storage = t.storage()
        if storage.data_ptr() not in seen:
            seen.add(storage.data_ptr())
            total += storage.nbytes()
    return total


def run(rank, world, port, steps, warmup):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    torch.manual_seed(0)
    layers = []
    for i in range(len(WIDTHS) - 1):
        layers.append(torch.nn.Linear(WIDTHS[i], WIDTHS[i + 1]))
        if i + 2 < len(WIDTHS):
            layers.append(torch.nn.ReLU())
    model = DistributedDataParallel(torch.nn.Sequential(*layers))
    optimizer = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam, lr=1e-3)
    torch.manual_seed(1 + rank)
    x, y = torch.randn(BATCH, WIDTHS[0]), torch.randn(BATCH, WIDTHS[-1])
    times, grad_bytes, last = [], 0, time.perf_counter()
    for step in range(warmup + steps):
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        grad_bytes = max(grad_bytes, storage_bytes([p.grad for p in model.parameters()]))
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        now = time.perf_counter()
        if step >= warmup:
            times.append((now - last) * 1e3)
        last = now
    state = [t for s in optimizer.optim.state.values() for k, t in s.items() if k != "step"]
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(f"RANK {rank} step_ms {statistics.median(times):.4f} params {storage_bytes(list(model.parameters()))} "
          f"grads {grad_bytes} buffers 0 state {storage_bytes(state)} rss {rss}", flush=True)
    dist.destroy_process_group()


def main():
    world, port, steps, warmup = (int(a) for a in sys.argv[1:5])
    mp.spawn(run, args=(world, port, steps, warmup), nprocs=world, join=True)


if __name__ == "__main__":
    main()
