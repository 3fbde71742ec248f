# One rank of PyTorch's DistributedDataParallel with one of PyTorch's own comm hooks, for
# bench/comm_hooks.cpp (which starts two of these per run, beside volt's workers, on the same
# model, batch and buckets). Run by Debian's /usr/bin/python3 (python3-torch 1.13). Rank 0 prints
# "STEP_MS <median ms per step>" and "STEP_BYTES <payload the hook handed to collectives in the
# last step>", the latter from the hooks' formulas applied to the buckets DDP passes the hook:
# all_reduce 4·n, fp16 2·n, noop 0, PowerSGD Σ (n+m)·r over the matrices it compresses plus n·m
# over the rest, batched PowerSGD 2·⌈√n⌉·r per bucket (4 bytes an element).
#
#   python3 comm_hooks_worker.py RANK MASTER_ADDR PORT SPEC WIDTHS BATCH BUCKET_MB STEPS WARMUP [--overlap]
#
# The hooks are PyTorch's, untouched, launched as DDP launches them, except for the PowerSGD
# hooks: batched PowerSGD gets the one-line fix of its 1.13 bug, and both PowerSGD hooks wait for
# each bucket's future before DDP launches the next bucket (--overlap: not). PyTorch 1.13 issues
# their second and third all_reduce from Gloo's worker threads, in an order that differs between
# the ranks when several buckets are in flight; as DDP runs them they hang or abort on most runs
# here (tests/ddp/python/comm_hook_reference.py, tools/comm_hook_stress.sh). Waiting costs
# PyTorch the overlap of those buckets' communication with the rest of backward.
import math
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "ddp", "python"))
from comm_hook_reference import make_hook, make_mlp, parse_spec, patch_batched_orthogonalize  # noqa: E402


def formula_bytes(name, state, bucket, iteration):
    numel = bucket.buffer().numel()
    if name == "noop":
        return 0
    if name == "fp16_compress":
        return 2 * numel
    if name == "allreduce" or iteration < state.start_powerSGD_iter:
        return 4 * numel
    rank = state.matrix_approximation_rank
    if name == "batched_powersgd":
        return 4 * 2 * math.ceil(math.sqrt(numel)) * rank
    elements = 0
    for tensor in bucket.gradients():
        n = tensor.shape[0]
        m = tensor.numel() // n
        r = min(n, m, rank)
        elements += (n + m) * r if (n + m) * r * state.min_compression_rate < n * m else n * m
    return 4 * elements


def main():
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    rank, master, port, spec = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]
    widths = [int(w) for w in sys.argv[5].split(",")]
    batch, bucket_mb, steps, warmup = int(sys.argv[6]), float(sys.argv[7]), int(sys.argv[8]), int(sys.argv[9])
    torch.set_num_threads(1)
    name, values = parse_spec(spec)
    if name == "batched_powersgd":
        patch_batched_orthogonalize()
    dist.init_process_group("gloo", init_method=f"tcp://{master}:{port}", rank=rank, world_size=2)
    torch.manual_seed(0)
    model = make_mlp(widths)
    ddp = DistributedDataParallel(model, bucket_cap_mb=bucket_mb)
    state, hook = make_hook(name, values)
    iteration = [0]
    step_bytes = {}
    wait_each_bucket = name in ("powersgd", "batched_powersgd") and "--overlap" not in sys.argv[10:]

    def counting_hook(hook_state, bucket):
        step_bytes[iteration[0]] = step_bytes.get(iteration[0], 0) + formula_bytes(name, state, bucket, iteration[0])
        if bucket.is_last():
            iteration[0] += 1
        future = hook(hook_state, bucket)
        if wait_each_bucket:
            future.wait()
        return future

    ddp.register_comm_hook(state, counting_hook)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=1e-3)
    torch.manual_seed(1 + rank)
    x, y = torch.randn(batch, widths[0]), torch.randn(batch, widths[-1])
    times = []
    for step in range(warmup + steps):
        dist.barrier()
        start = time.perf_counter()
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if step >= warmup:
            times.append((time.perf_counter() - start) * 1e3)
    checksum = torch.tensor([sum(p.double().sum().item() for p in model.parameters())], dtype=torch.float64)
    both = [torch.zeros(1, dtype=torch.float64) for _ in range(2)]
    dist.all_gather(both, checksum)
    if name != "noop" and both[0].item() != both[1].item():
        print(f"comm_hooks_worker: rank {rank}: the ranks' parameters differ after training", file=sys.stderr)
        sys.exit(3)
    if rank == 0:
        print(f"STEP_MS {statistics.median(times):.4f}", flush=True)
        print(f"STEP_BYTES {step_bytes[iteration[0] - 1]}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
