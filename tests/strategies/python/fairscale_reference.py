"""fairscale 0.4.13 as the oracle of volt's strategies (tests/strategies/fairscale_oracle_test.cpp).

  /usr/bin/python3 fairscale_reference.py --world N [--epochs 2] [--batch-size 4] [--port P]
      --case SPEC;OPTIMIZER;MODEL;INITIAL [--case ...]

For each case in turn, trains the distributed worker's regression problem (tests/distributed/worker,
--mode train) on the same N processes over Gloo (one start for every case: importing PyTorch is
most of a run) with fairscale's implementation of the volt strategy SPEC, OPTIMIZER momentum or
adam, MODEL mlp or mlp_wrapped, from the initial parameters in the file INITIAL. SPEC is written as
volt's --strategy takes it:
  ddp:shard_optimizer=true              torch DDP + fairscale.optim.OSS
  ddp_sharded[:reduce_buffer_size=..,reduce_fp16=..,broadcast_fp16=..]
                                        fairscale ShardedDataParallel + OSS
  slowmo:localsgd_frequency=..,slowmo_frequency=..,slowmo_momentum=..,slowmo_lr=..,
         nprocs_per_node=..,memory_efficient=..,num_shards=..
                                        fairscale SlowMoDistributedDataParallel (LOCALSGD)
  fsdp[:sharding_strategy=FULL_SHARD|SHARD_GRAD_OP,min_num_params=..]
                                        fairscale FullyShardedDataParallel, flat parameters;
                                        SHARD_GRAD_OP is reshard_after_forward=False,
                                        min_num_params fairscale's auto_wrap by size, and
                                        --model mlp_wrapped wraps body.2 by hand as volt's does
A key this script does not map is refused: the oracle never ignores an option.

The same problem as the worker's: the 64 samples of regression_dataset(seed 7) in
DistributedSampler(shuffle=False) order, batch --batch-size per rank, mean squared error, SGD
(lr 0.05, momentum 0.9) or Adam (lr 0.01), and the initial parameters volt printed (INITIAL: its
INITIAL line's comma-separated values, in named_parameters order). After every optimizer step each
rank prints "CASE K STEP rank=R step=S params=P0,P1,..." (K the case's index; 17 digits, one
write: below PIPE_BUF), its own full parameters (SlowMo's ranks differ between averages).

fairscale runs on the CPU through fairscale_on_cpu.py (what it changes, and why that leaves the
arithmetic fairscale's, is said there).
"""
import argparse
import functools
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fairscale_on_cpu  # noqa: E402

FEATURES, HIDDEN, SAMPLES = 8, 4, 64


class RegressionMlp(torch.nn.Module):
    """The worker's --model mlp (tests/support/regression_problem.cpp)."""

    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(FEATURES, HIDDEN), torch.nn.Tanh(),
                                        torch.nn.Linear(HIDDEN, HIDDEN), torch.nn.Tanh())
        self.linear = torch.nn.Linear(HIDDEN, 1)

    def forward(self, x):
        return self.linear(self.body(x))


def regression_dataset(seed=7):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(SAMPLES, FEATURES, generator=generator)
    w = torch.randn(FEATURES, 1, generator=generator)
    y = x.matmul(w) + 0.1 * torch.randn(SAMPLES, 1, generator=generator)
    return x, y


def parse_strategy(spec):
    name, _, rest = spec.partition(":")
    options = {}
    for item in filter(None, rest.split(",")):
        key, _, value = item.partition("=")
        options[key] = value
    return name, options


def take(options, key, convert, default):
    return convert(options.pop(key)) if key in options else default


def as_bool(value):
    if value not in ("true", "false"):
        raise SystemExit(f"fairscale_reference: expected true or false, got '{value}'")
    return value == "true"


def build(name, options, model_kind, model, optimizer_class, optimizer_args, world):
    """fairscale's counterpart of volt's strategy `name`: (the model to call, the optimizer, after_step)."""
    from fairscale.optim.oss import OSS

    after_step = lambda optimizer: None  # noqa: E731
    if model_kind == "mlp_wrapped" and name != "fsdp":
        raise SystemExit("fairscale_reference: --model mlp_wrapped is for fsdp")
    if name == "ddp":
        if take(options, "shard_optimizer", as_bool, False) is not True:
            raise SystemExit("fairscale_reference: ddp is compared with fairscale only with shard_optimizer=true")
        optimizer = OSS(model.parameters(), optim=optimizer_class, **optimizer_args)
        wrapped = torch.nn.parallel.DistributedDataParallel(model)
    elif name == "ddp_sharded":
        from fairscale.nn.data_parallel import ShardedDataParallel

        optimizer = OSS(model.parameters(), optim=optimizer_class,
                        broadcast_fp16=take(options, "broadcast_fp16", as_bool, False), **optimizer_args)
        reduce_buffer_size = take(options, "reduce_buffer_size", int, 2**23)
        reduce_fp16 = take(options, "reduce_fp16", as_bool, False)
        if reduce_fp16 and reduce_buffer_size > 0:
            # fairscale turns reduce_fp16 off, with a warning, when reduce buffers are on (volt reduces
            # its buckets in float16): it would not be the oracle of what volt does.
            raise SystemExit("fairscale_reference: fairscale ignores reduce_fp16 with reduce buffers; "
                             "give reduce_buffer_size=0 with it")
        wrapped = ShardedDataParallel(model, optimizer, reduce_buffer_size=reduce_buffer_size,
                                      reduce_fp16=reduce_fp16)
    elif name == "slowmo":
        from fairscale.experimental.nn.data_parallel import SlowMoDistributedDataParallel

        if "nprocs_per_node" not in options:  # volt's default is the cluster's, which fairscale cannot know
            raise SystemExit("fairscale_reference: give slowmo's nprocs_per_node")
        wrapped = SlowMoDistributedDataParallel(
            model, nprocs_per_node=int(options.pop("nprocs_per_node")),
            localsgd_frequency=take(options, "localsgd_frequency", int, 3),
            slowmo_frequency=take(options, "slowmo_frequency", int, 48),
            slowmo_momentum=take(options, "slowmo_momentum", float, 0.5),
            slowmo_lr=take(options, "slowmo_lr", float, 1.0),
            slowmo_memory_efficient=take(options, "memory_efficient", as_bool, True),
            slowmo_num_shards=take(options, "num_shards", int, 32))
        optimizer = optimizer_class(wrapped.parameters(), **optimizer_args)
        after_step = wrapped.perform_slowmo
    elif name == "fsdp":
        from fairscale.nn import auto_wrap, default_auto_wrap_policy, enable_wrap
        from fairscale.nn.data_parallel import FullyShardedDataParallel

        fairscale_on_cpu.fsdp_on_gloo()
        sharding = take(options, "sharding_strategy", str, "FULL_SHARD")
        if sharding not in ("FULL_SHARD", "SHARD_GRAD_OP"):
            raise SystemExit(f"fairscale_reference: fairscale's FSDP has no sharding_strategy={sharding}")
        unit_args = dict(flatten_parameters=True, reshard_after_forward=sharding == "FULL_SHARD",
                         compute_device=torch.device("cpu"))
        if model_kind == "mlp_wrapped":
            model.body[2] = FullyShardedDataParallel(model.body[2], **unit_args)
        if "min_num_params" in options:
            policy = functools.partial(default_auto_wrap_policy, min_num_params=int(options.pop("min_num_params")))
            with enable_wrap(wrapper_cls=FullyShardedDataParallel, **unit_args):
                model = auto_wrap(model, auto_wrap_policy=policy)
        wrapped = FullyShardedDataParallel(model, **unit_args)
        optimizer = optimizer_class(wrapped.parameters(), **optimizer_args)
    else:
        raise SystemExit(f"fairscale_reference: no fairscale counterpart for strategy '{name}'")
    if options:
        raise SystemExit(f"fairscale_reference: {name}: options not mapped to fairscale: {sorted(options)}")
    return wrapped, optimizer, after_step


def full_parameters(name, wrapped, names):
    """This rank's parameters, whole, in the plain model's named_parameters order."""
    if name == "fsdp":
        state = wrapped.state_dict()  # collective: gathers every unit
    else:
        module = wrapped.module if hasattr(wrapped, "module") else wrapped
        state = dict(module.named_parameters())
    return torch.cat([state[n].detach().reshape(-1).double() for n in names])


def run_case(rank, args, index, case):
    spec, optimizer_name, model_kind, initial_file = case.split(";")
    model = RegressionMlp()
    names = [n for n, _ in model.named_parameters()]
    with open(initial_file) as f:
        initial = torch.tensor([float(v) for v in f.read().strip().split(",")], dtype=torch.float64)
    offset = 0
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(initial[offset:offset + p.numel()].view_as(p))
            offset += p.numel()
    assert offset == initial.numel(), f"{initial_file} has {initial.numel()} values, the model {offset}"

    if optimizer_name == "momentum":
        optimizer_class, optimizer_args = torch.optim.SGD, dict(lr=0.05, momentum=0.9)
    elif optimizer_name == "adam":
        optimizer_class, optimizer_args = torch.optim.Adam, dict(lr=0.01)
    else:
        raise SystemExit(f"fairscale_reference: the optimizer is momentum or adam, got '{optimizer_name}'")
    name, options = parse_strategy(spec)
    wrapped, optimizer, after_step = build(name, options, model_kind, model, optimizer_class, optimizer_args,
                                           args.world)

    x, y = regression_dataset()
    dataset = torch.utils.data.TensorDataset(x, y)
    sampler = torch.utils.data.distributed.DistributedSampler(dataset, num_replicas=args.world, rank=rank,
                                                              shuffle=False)
    loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch_size, sampler=sampler)
    step = 0
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for inputs, targets in loader:
            optimizer.zero_grad()
            loss = (wrapped(inputs) - targets).square().mean()
            loss.backward()
            optimizer.step()
            after_step(optimizer)
            step += 1
            params = full_parameters(name, wrapped, names)
            line = f"CASE {index} STEP rank={rank} step={step} params=" + ",".join(f"{v:.17g}" for v in params.tolist())
            os.write(1, (line + "\n").encode())


def run(rank, args):
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(args.port)
    dist.init_process_group("gloo", rank=rank, world_size=args.world)
    fairscale_on_cpu.cuda_streams_as_no_ops()
    for index, case in enumerate(args.case):
        run_case(rank, args, index, case)
        dist.barrier()
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--world", type=int, required=True)
    parser.add_argument("--case", action="append", required=True, help="SPEC;OPTIMIZER;MODEL;INITIAL")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--port", type=int, default=29761)
    args = parser.parse_args()
    torch.set_num_threads(1)
    # fork: the children start with torch imported (spawn would import it once more in each).
    mp.start_processes(run, args=(args,), nprocs=args.world, start_method="fork")


if __name__ == "__main__":
    main()
