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

The problem (data, order, loss, optimizers, the CASE K STEP lines: every rank's own full
parameters after every step, SlowMo's ranks differing between averages) is worker_problem.py's.

fairscale runs on the CPU through fairscale_on_cpu.py (what it changes, and why that leaves the
arithmetic fairscale's, is said there).
"""
import functools
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fairscale_on_cpu  # noqa: E402
import worker_problem  # noqa: E402
from worker_problem import RegressionMlp, as_bool, refuse, take  # noqa: E402


def build(name, options, model_kind, model, optimizer_class, optimizer_args, world):
    """fairscale's counterpart of volt's strategy `name`: (the model to call, the optimizer, after_step)."""
    from fairscale.optim.oss import OSS

    after_step = lambda optimizer: None  # noqa: E731
    if model_kind == "mlp_wrapped" and name != "fsdp":
        refuse("--model mlp_wrapped is for fsdp")
    if name == "ddp":
        if take(options, "shard_optimizer", as_bool, False) is not True:
            refuse("ddp is compared with fairscale only with shard_optimizer=true")
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
            refuse("fairscale ignores reduce_fp16 with reduce buffers; "
                             "give reduce_buffer_size=0 with it")
        wrapped = ShardedDataParallel(model, optimizer, reduce_buffer_size=reduce_buffer_size,
                                      reduce_fp16=reduce_fp16)
    elif name == "slowmo":
        from fairscale.experimental.nn.data_parallel import SlowMoDistributedDataParallel

        if "nprocs_per_node" not in options:  # volt's default is the cluster's, which fairscale cannot know
            refuse("give slowmo's nprocs_per_node")
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
            refuse(f"fairscale's FSDP has no sharding_strategy={sharding}")
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
        refuse(f"no fairscale counterpart for strategy '{name}'")
    if options:
        refuse(f"{name}: options not mapped to fairscale: {sorted(options)}")
    return wrapped, optimizer, after_step


def full_parameters(name, wrapped, names):
    """This rank's parameters, whole, in the plain model's named_parameters order."""
    if name != "fsdp":
        return worker_problem.local_parameters(wrapped, names)
    state = wrapped.state_dict()  # collective: gathers every unit
    return torch.cat([state[n].detach().reshape(-1).double() for n in names])


def run_case(rank, args, index, spec, optimizer_name, model_kind, initial_file):
    model = RegressionMlp()
    names = [n for n, _ in model.named_parameters()]
    worker_problem.load_initial(model, initial_file)
    optimizer_class, optimizer_args = worker_problem.optimizer_of(optimizer_name)
    name, options = worker_problem.parse_strategy(spec)
    wrapped, optimizer, after_step = build(name, options, model_kind, model, optimizer_class, optimizer_args,
                                           args.world)
    worker_problem.train(rank, args, index, wrapped, optimizer, after_step,
                         lambda: full_parameters(name, wrapped, names))


if __name__ == "__main__":
    worker_problem.main(run_case, after_init=fairscale_on_cpu.cuda_streams_as_no_ops)
