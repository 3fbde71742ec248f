# One rank of PyTorch's own DistributedDataParallel, for bench/ddp_vs_torch.cpp (which starts two
# of these per round and compares them with volt's DDP on the same model, batch and buckets).
# Run by Debian's /usr/bin/python3 (python3-torch 1.13). Prints "STEP_MS <median ms per step>".
#
#   python3 ddp_vs_torch_worker.py RANK PORT WIDTHS BATCH BUCKET_MB NO_SYNC STEPS WARMUP [BUCKET_VIEW]
import contextlib
import statistics
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def main():
    rank, port = int(sys.argv[1]), int(sys.argv[2])
    widths = [int(w) for w in sys.argv[3].split(",")]
    batch, bucket_mb, no_sync = int(sys.argv[4]), float(sys.argv[5]), sys.argv[6] == "1"
    steps, warmup = int(sys.argv[7]), int(sys.argv[8])
    bucket_view = len(sys.argv) > 9 and sys.argv[9] == "1"
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    torch.manual_seed(0)
    layers = []
    for i in range(len(widths) - 1):
        layers.append(torch.nn.Linear(widths[i], widths[i + 1]))
        if i + 2 < len(widths):
            layers.append(torch.nn.ReLU())
    model = DistributedDataParallel(torch.nn.Sequential(*layers), bucket_cap_mb=bucket_mb,
                                    gradient_as_bucket_view=bucket_view)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    torch.manual_seed(1 + rank)
    x, y = torch.randn(batch, widths[0]), torch.randn(batch, widths[-1])
    times = []
    for step in range(warmup + steps):
        dist.barrier()
        start = time.perf_counter()
        with model.no_sync() if no_sync else contextlib.nullcontext():
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
        optimizer.step()
        # With bucket views the gradients stay the buckets' views (zeroed, as volt's worker does).
        optimizer.zero_grad(set_to_none=not bucket_view)
        if step >= warmup:
            times.append((time.perf_counter() - start) * 1e3)
    if rank == 0:
        print(f"STEP_MS {statistics.median(times):.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
