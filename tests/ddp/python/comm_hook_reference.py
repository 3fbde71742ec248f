# PyTorch's own DDP comm hooks as the reference for tests/ddp/comm_hook_parity_test.cpp.
#
#   /usr/bin/python3 comm_hook_reference.py OUT_DIR SPEC [--widths 32,48,48,48,48,48,48,4] [--steps 20]
#       [--batch 16] [--lr 0.1] [--bucket-cap-mb 0.015] [--seed 0] [--attempts 3] [--attempt-timeout 90]
#       [--overlap] [--unpatched]
#
# SPEC is what volt's `ddp:` strategy takes after `comm_hook=`: `allreduce`, `fp16_compress`,
# `bf16_compress`, `noop`, `powersgd:matrix_approximation_rank=2,start_powersgd_iter=3,...`,
# `batched_powersgd:...`, optionally with `comm_wrapper=fp16|bf16` (`allreduce,comm_wrapper=fp16`).
#
# Writes OUT_DIR/data.pt (a plain dict: "init" the MLP's initial state dict, "x"/"y" every rank's
# batch of every step as "<rank>.<step>"), then trains the MLP on two ranks (processes, Gloo on
# 127.0.0.1) with torch.nn.parallel.DistributedDataParallel and PyTorch's hook, SGD, and writes
# OUT_DIR/rank<r>.pt: "params" {"<step>": state dict after that step} and "buckets"
# {"<iteration>": the numel of every bucket the hook saw, in order}.
#
# Bounded: every attempt (both ranks) runs under --attempt-timeout seconds and is retried up to
# --attempts times (PyTorch 1.13's fp16 hook has been seen to hang and PowerSGD to abort on some
# CPU/Gloo runs). Exit status: 0 reference written; 3 the last attempt hung; 4 it failed.
#
# What differs from DDP with PyTorch's hooks untouched, each on purpose:
# * Each bucket's future is waited before the next bucket's hook runs (--overlap: not). PyTorch's
#   PowerSGD hooks issue their second and third all_reduce from a future's callback, which Gloo
#   runs on one of its worker threads; with several buckets in flight the two ranks then issue
#   collectives in different orders, and the run hangs or aborts ("op.preamble.length <=
#   op.nbytes" in gloo/transport/tcp/pair.cc). Waiting changes when the numbers are computed,
#   not which: the reference is the same arithmetic in a fixed order. tools/comm_hook_stress.sh
#   counts how often the untouched (--overlap) runs fail.
# * DDP's first bucket: PyTorch 1.13 caps the first rebuilt bucket at
#   dist._DEFAULT_FIRST_BUCKET_BYTES (1 MiB) even when bucket_cap_mb is smaller; volt caps it at
#   min(1 MiB, bucket_cap_mb) (strategies/ddp/reducer.cpp). With the small cap used here we set
#   PyTorch's knob to volt's value so that both build the same buckets (the test checks they do).
# * PyTorch's batched_powerSGD_hook (1.13 and 2.11 alike) calls _orthogonalize on its 2-D P and
#   Q, and _orthogonalize asserts 3-D input: the hook fails with an AssertionError as soon as
#   compression starts (--unpatched shows it). We patch that one bug: a 2-D input is orthogonalized as a
#   batch of one, in place (an unsqueezed view), which is what the hook means to compute.
# * bfloat16 (bf16_compress, comm_wrapper=bf16): Gloo in PyTorch before 2.2 has no bfloat16
#   all_reduce. There we replace dist.all_reduce for bfloat16 tensors only by an all_gather of the
#   bits (as float16) and a bfloat16 sum, which is what volt's Gloo path computes (Note [bfloat16
#   over Gloo]); for two ranks the one rounded addition is order-free. PyTorch's hook code is used
#   as is around it: on 1.13 this side is a hand-made reference, not PyTorch on its own. PyTorch
#   2.2+ reduces bfloat16 over Gloo itself, and runs untouched.
import argparse
import datetime
import os
import socket
import subprocess
import sys
import time

HOOKS = ("allreduce", "fp16_compress", "bf16_compress", "noop", "powersgd", "batched_powersgd")
POWERSGD_KEYS = {
    "matrix_approximation_rank": ("matrix_approximation_rank", int),
    "start_powersgd_iter": ("start_powerSGD_iter", int),
    "start_powerSGD_iter": ("start_powerSGD_iter", int),
    "min_compression_rate": ("min_compression_rate", float),
    "use_error_feedback": ("use_error_feedback", lambda v: v == "true"),
    "warm_start": ("warm_start", lambda v: v == "true"),
    "orthogonalization_epsilon": ("orthogonalization_epsilon", float),
    "random_seed": ("random_seed", int),
    "batch_tensors_with_same_shape": ("batch_tensors_with_same_shape", lambda v: v == "true"),
}


def parse_spec(spec):
    """'powersgd:a=1,b=2' -> ('powersgd', {'a': '1', 'b': '2'}); 'allreduce,comm_wrapper=fp16' as volt's
    strategy spec writes a wrapper around a hook without keys."""
    cut = min((spec.find(c) for c in ":," if c in spec), default=len(spec))
    name, rest = spec[:cut], spec[cut + 1:]
    if name not in HOOKS:
        raise SystemExit(f"comm_hook_reference: unknown hook '{name}'; expected one of {HOOKS}")
    values = dict(item.split("=", 1) for item in rest.split(",") if item)
    return name, values


def make_mlp(widths):
    import torch

    layers = []
    for i in range(len(widths) - 1):
        layers.append(torch.nn.Linear(widths[i], widths[i + 1]))
        if i + 2 < len(widths):
            layers.append(torch.nn.Tanh())
    return torch.nn.Sequential(*layers)


def write_data(args, widths):
    import torch

    torch.manual_seed(args.seed)
    model = make_mlp(widths)
    data = {"init": {k: v.detach().clone() for k, v in model.state_dict().items()}, "x": {}, "y": {}}
    generator = torch.Generator().manual_seed(args.seed + 1)
    for step in range(args.steps):
        for rank in range(2):
            data["x"][f"{rank}.{step}"] = torch.randn(args.batch, widths[0], generator=generator)
            data["y"][f"{rank}.{step}"] = torch.randn(args.batch, widths[-1], generator=generator)
    torch.save(data, os.path.join(args.out_dir, "data.pt"))


def emulate_bf16_all_reduce():
    """dist.all_reduce for bfloat16 tensors where Gloo has none (PyTorch < 2.2): gather the bits, sum
    in bfloat16. A no-op on PyTorch 2.2+."""
    import torch
    import torch.distributed as dist

    if tuple(int(part) for part in torch.__version__.split(".")[:2]) >= (2, 2):
        return

    original = dist.all_reduce

    class Done:
        def __init__(self, tensor):
            self.future = torch.futures.Future()
            self.future.set_result([tensor])

        def get_future(self):
            return self.future

        def wait(self):
            return True

    def all_reduce(tensor, op=dist.ReduceOp.SUM, group=None, async_op=False):
        if tensor.dtype != torch.bfloat16:
            return original(tensor, op=op, group=group, async_op=async_op)
        assert op == dist.ReduceOp.SUM
        bits = tensor.contiguous().view(torch.float16)
        parts = [torch.empty_like(bits) for _ in range(dist.get_world_size(group))]
        dist.all_gather(parts, bits, group=group)
        total = parts[0].view(torch.bfloat16)
        for part in parts[1:]:
            total = total + part.view(torch.bfloat16)
        tensor.copy_(total)
        return Done(tensor) if async_op else None

    dist.all_reduce = all_reduce


def patch_batched_orthogonalize():
    """PyTorch 1.13's batched_powerSGD_hook passes 2-D P/Q to _orthogonalize, which asserts 3-D."""
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as module

    original = module._orthogonalize

    def orthogonalize(matrices, epsilon=0):
        if matrices.dim() == 2:
            return original(matrices.unsqueeze(0), epsilon)
        return original(matrices, epsilon)

    module._orthogonalize = orthogonalize


def make_hook(name, values):
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import debugging_hooks, default_hooks
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd

    values = dict(values)
    wrapper = values.pop("comm_wrapper", values.pop("ddp_comm_wrapper", None))
    if name in ("powersgd", "batched_powersgd"):
        kwargs = {}
        for key, text in values.items():
            if key not in POWERSGD_KEYS:
                raise SystemExit(f"comm_hook_reference: unknown PowerSGD key '{key}'")
            target, convert = POWERSGD_KEYS[key]
            kwargs[target] = convert(text)
        state = psgd.PowerSGDState(process_group=None, **kwargs)
        hook = psgd.powerSGD_hook if name == "powersgd" else psgd.batched_powerSGD_hook
    else:
        if values:
            raise SystemExit(f"comm_hook_reference: '{name}' takes no keys, got {values}")
        state = None
        hook = {
            "allreduce": default_hooks.allreduce_hook,
            "fp16_compress": default_hooks.fp16_compress_hook,
            "bf16_compress": default_hooks.bf16_compress_hook,
            "noop": debugging_hooks.noop_hook,
        }[name]
    if wrapper == "bf16":
        hook = default_hooks.bf16_compress_wrapper(hook)
    elif wrapper == "fp16":
        hook = default_hooks.fp16_compress_wrapper(hook)
    elif wrapper is not None:
        raise SystemExit(f"comm_hook_reference: unknown comm_wrapper '{wrapper}'")
    return state, hook


def run_rank(args, widths, rank, port):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    torch.set_num_threads(1)
    name, values = parse_spec(args.spec)
    if name == "batched_powersgd" and not args.unpatched:
        patch_batched_orthogonalize()
    if name == "bf16_compress" or values.get("comm_wrapper") == "bf16":
        emulate_bf16_all_reduce()
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=args.attempt_timeout))
    data = torch.load(os.path.join(args.out_dir, "data.pt"))
    model = make_mlp(widths)
    model.load_state_dict(data["init"])
    cap_bytes = int(args.bucket_cap_mb * 1024 * 1024)
    dist._DEFAULT_FIRST_BUCKET_BYTES = min(1 << 20, cap_bytes)
    ddp = DistributedDataParallel(model, bucket_cap_mb=args.bucket_cap_mb)
    state, hook = make_hook(name, values)

    buckets = {}
    iteration = [0]

    def recording_hook(hook_state, bucket):
        buckets.setdefault(str(iteration[0]), []).append(bucket.buffer().numel())
        if bucket.is_last():
            iteration[0] += 1
        future = hook(hook_state, bucket)
        if args.serialize:
            future.wait()
        return future

    ddp.register_comm_hook(state, recording_hook)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=args.lr)
    params = {}
    for step in range(args.steps):
        x, y = data["x"][f"{rank}.{step}"], data["y"][f"{rank}.{step}"]
        optimizer.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        loss.backward()
        optimizer.step()
        params[str(step)] = {k: v.detach().clone() for k, v in model.state_dict().items()}
    result = {"params": params, "buckets": {k: torch.tensor(v, dtype=torch.int64) for k, v in buckets.items()}}
    torch.save(result, os.path.join(args.out_dir, f"rank{rank}.pt.tmp"))
    os.replace(os.path.join(args.out_dir, f"rank{rank}.pt.tmp"), os.path.join(args.out_dir, f"rank{rank}.pt"))
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def attempt(args):
    """One two-rank run. Returns 'ok', 'hang' or 'failed (<statuses>)'."""
    for rank in range(2):
        path = os.path.join(args.out_dir, f"rank{rank}.pt")
        if os.path.exists(path):
            os.remove(path)
    port = free_port()
    command = [sys.executable, os.path.abspath(__file__), args.out_dir, args.spec, "--widths", args.widths,
               "--steps", str(args.steps), "--batch", str(args.batch), "--lr", str(args.lr),
               "--bucket-cap-mb", str(args.bucket_cap_mb), "--seed", str(args.seed),
               "--attempt-timeout", str(args.attempt_timeout), "--port", str(port)]
    if not args.serialize:
        command.append("--overlap")
    if args.unpatched:
        command.append("--unpatched")
    ranks = [subprocess.Popen(command + ["--rank", str(rank)]) for rank in range(2)]
    deadline = time.monotonic() + args.attempt_timeout
    statuses = []
    hung = False
    for process in ranks:
        try:
            statuses.append(process.wait(timeout=max(0.1, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            hung = True
    if hung:
        for process in ranks:
            if process.poll() is None:
                process.kill()
                process.wait()
        return "hang"
    if any(statuses):
        return f"failed (exit statuses {statuses})"
    return "ok"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out_dir")
    parser.add_argument("spec")
    parser.add_argument("--widths", default="32,48,48,48,48,48,48,4")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--bucket-cap-mb", type=float, default=0.015)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--attempts", type=int, default=3)
    parser.add_argument("--attempt-timeout", type=float, default=90)
    parser.add_argument("--overlap", dest="serialize", action="store_false",
                        help="launch every bucket's hook as DDP does, without waiting for the previous one")
    parser.add_argument("--unpatched", action="store_true",
                        help="leave PyTorch 1.13's batched_powerSGD_hook bug (2-D _orthogonalize) in place")
    parser.add_argument("--rank", type=int, default=None)
    parser.add_argument("--port", type=int, default=None)
    args = parser.parse_args()
    widths = [int(w) for w in args.widths.split(",")]
    if args.rank is not None:
        run_rank(args, widths, args.rank, args.port)
        return 0
    parse_spec(args.spec)
    os.makedirs(args.out_dir, exist_ok=True)
    write_data(args, widths)
    outcomes = []
    for number in range(1, args.attempts + 1):
        outcome = attempt(args)
        outcomes.append(outcome)
        print(f"comm_hook_reference: {args.spec}: attempt {number}: {outcome}", flush=True)
        if outcome == "ok":
            return 0
    print(f"comm_hook_reference: {args.spec}: no reference after {args.attempts} attempt(s): {outcomes}", flush=True)
    return 3 if outcomes[-1] == "hang" else 4


if __name__ == "__main__":
    sys.exit(main())
