"""PyTorch's own DDP comm hooks and post-local-SGD as the oracle of volt's `ddp` strategy
(tests/strategies/pytorch_ddp_oracle_test.cpp).

  PYTHON pytorch_ddp_reference.py --world N [--epochs 2] [--batch-size 4] [--port P]
      --case SPEC;OPTIMIZER;mlp;INITIAL [--case ...]

SPEC is volt's --strategy `ddp:...` text; each key becomes what PyTorch does for it
(docs/comm_hooks.md and docs/post_local_sgd.md give volt's keys, defaults and meaning):
  comm_hook=allreduce|fp16_compress|bf16_compress|noop (alias ddp_comm_hook)
        DistributedDataParallel.register_comm_hook with default_hooks.allreduce_hook,
        fp16_compress_hook, bf16_compress_hook, debugging_hooks.noop_hook; no comm_hook: DDP's own
  comm_hook=powersgd|batched_powersgd with matrix_approximation_rank, start_powersgd_iter
        (start_powerSGD_iter), min_compression_rate, use_error_feedback, warm_start,
        orthogonalization_epsilon, random_seed, batch_tensors_with_same_shape
        powerSGD_hook / batched_powerSGD_hook over a PowerSGDState with those values, volt's
        defaults being PyTorch's (a PowerSGD key without a PowerSGD hook is refused, as volt does)
  comm_wrapper=fp16|bf16 (alias ddp_comm_wrapper)
        default_hooks.fp16_compress_wrapper / bf16_compress_wrapper around the hook
  comm_hook=post_local_sgd with start_local_sgd_iter (start_localSGD_iter, default 1000),
        post_local_gradient_allreduce (true), subgroup_size, and model_averaging_period=P or
        model_averaging_periods=P1:G1,P2:G2,...
        post_localSGD_hook over PostLocalSGDState(subgroup = this rank's block of subgroup_size
        consecutive ranks, dist.new_subgroups), and PostLocalSGDOptimizer around the optimizer
        with PeriodicModelAverager(P) or HierarchicalModelAverager({P1: G1, ...}), warm-up
        start_local_sgd_iter: PyTorch's documented composition. subgroup_size is required: volt's
        default is the cluster's node, which this script cannot know.
  static_graph, gradient_as_bucket_view, find_unused_parameters, bucket_cap_mb
        DistributedDataParallel's arguments of the same names
A key this script does not map is refused (SystemExit): the oracle never ignores an option.

The problem (data, order, loss, optimizers, the CASE K STEP lines: every rank's own parameters
after every step, which differ between averages under local SGD) is worker_problem.py's.

What is not PyTorch as published, each on purpose and only where that PyTorch needs it:
* batched_powerSGD_hook passes 2-D P and Q to _orthogonalize, which asserts 3-D input, and fails at
  its first compressed iteration (PyTorch 1.13 and 2.11 alike): patched as
  tests/ddp/python/comm_hook_reference.py patches it (the same function, imported from there).
* PyTorch 1.13's dist.new_subgroups refuses to run without CUDA even when given a group size; there
  it is replaced by its own body without that check (tests/ddp/python/post_local_sgd_reference.py,
  imported from there). PyTorch 2.x checks for CUDA only without a group size, and runs untouched.
* bfloat16 over Gloo (bf16_compress, comm_wrapper=bf16): Gloo reduces bfloat16 from PyTorch 2.2
  on. Before that, dist.all_reduce of a bfloat16 tensor is replaced as comm_hook_reference.py
  replaces it (its function: an all_gather of the bits, a bfloat16 sum), on two ranks only, where
  the one rounded addition does not depend on the order; PyTorch's hook code runs as is around it,
  registered under another name (1.13's register_comm_hook refuses the bf16 hooks by their names
  without CUDA and NCCL).
Nothing else: DDP's own buckets (the MLP's 61 parameters are one bucket), so PowerSGD's second
and third all_reduce, issued from Gloo's callback thread, cannot interleave with another bucket's
(the reason comm_hook_reference.py waits for each bucket; not needed here).
"""
import collections
import importlib
import os
import sys

import torch
import torch.distributed as dist

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "ddp", "python"))
import worker_problem  # noqa: E402
from worker_problem import RegressionMlp, as_bool, refuse, take  # noqa: E402

TORCH_VERSION = tuple(int(part) for part in torch.__version__.split(".")[:2])
POWERSGD_HOOKS = ("powersgd", "batched_powersgd")


def powersgd_state(hook_name, options):
    """PyTorch's PowerSGDState with the values of volt's PowerSGD keys (the defaults are the same)."""
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook

    arguments = dict(
        matrix_approximation_rank=take(options, "matrix_approximation_rank", int, 1),
        start_powerSGD_iter=take(options, "start_powersgd_iter", int, 1000, "start_powerSGD_iter"),
        use_error_feedback=take(options, "use_error_feedback", as_bool, True),
        warm_start=take(options, "warm_start", as_bool, True),
        orthogonalization_epsilon=take(options, "orthogonalization_epsilon", float, 0.0),
        random_seed=take(options, "random_seed", int, 0))
    if hook_name == "powersgd":  # batched_powerSGD_hook reads neither; volt's batched_powersgd refuses them
        arguments["min_compression_rate"] = take(options, "min_compression_rate", float, 2.0)
        arguments["batch_tensors_with_same_shape"] = take(options, "batch_tensors_with_same_shape", as_bool, False)
    return powerSGD_hook.PowerSGDState(process_group=None, **arguments)


def new_subgroups_without_cuda():
    """PyTorch 1.13's dist.new_subgroups refuses to run without CUDA (see the header): importing
    post_local_sgd_reference replaces it by its body without that check."""
    if TORCH_VERSION < (2, 0):
        importlib.import_module("post_local_sgd_reference")


def subgroup_of_size(size):
    """This rank's block of `size` consecutive ranks (dist.new_subgroups: collective, every rank)."""
    new_subgroups_without_cuda()
    subgroup, _ = dist.new_subgroups(group_size=size)
    return subgroup


def averager_of(options, start):
    """PyTorch's model averager for volt's averaging key (exactly one of the two)."""
    from torch.distributed.algorithms.model_averaging import averagers, hierarchical_model_averager

    period = take(options, "model_averaging_period", int, None)
    periods = take(options, "model_averaging_periods", str, None)
    if (period is None) == (periods is None):
        refuse("post_local_sgd takes exactly one of model_averaging_period and model_averaging_periods")
    if period is not None:
        return averagers.PeriodicModelAverager(period=period, warmup_steps=start)
    new_subgroups_without_cuda()  # HierarchicalModelAverager calls dist.new_subgroups
    levels = collections.OrderedDict((int(p), int(g)) for p, g in (level.split(":") for level in periods.split(",")))
    return hierarchical_model_averager.HierarchicalModelAverager(period_group_size_dict=levels, warmup_steps=start)


def hook_of(options):
    """(hook state, hook, averager or None) for volt's comm_hook and comm_wrapper keys; (None, None,
    None) for DDP's own reduction."""
    from torch.distributed.algorithms.ddp_comm_hooks import debugging_hooks, default_hooks, powerSGD_hook
    from torch.distributed.algorithms.ddp_comm_hooks import post_localSGD_hook

    name = take(options, "comm_hook", str, None, "ddp_comm_hook")
    wrapper = take(options, "comm_wrapper", str, "none", "ddp_comm_wrapper")
    if name is None and wrapper == "none":
        return None, None, None
    name = name or "allreduce"
    emulated_bfloat16 = (name == "bf16_compress" or wrapper == "bf16") and TORCH_VERSION < (2, 2)
    if emulated_bfloat16:
        if dist.get_world_size() != 2:
            refuse(f"PyTorch {torch.__version__}'s Gloo has no bfloat16 all_reduce (from 2.2 on), and its "
                   "stand-in sums in one fixed order, which is Gloo's only for two ranks")
        from comm_hook_reference import emulate_bf16_all_reduce

        emulate_bf16_all_reduce()
    state, averager = None, None
    plain = {"allreduce": default_hooks.allreduce_hook, "fp16_compress": default_hooks.fp16_compress_hook,
             "bf16_compress": default_hooks.bf16_compress_hook, "noop": debugging_hooks.noop_hook}
    if name in plain:
        hook = plain[name]
    elif name in POWERSGD_HOOKS:
        state = powersgd_state(name, options)
        hook = powerSGD_hook.powerSGD_hook
        if name == "batched_powersgd":
            from comm_hook_reference import patch_batched_orthogonalize

            patch_batched_orthogonalize()
            hook = powerSGD_hook.batched_powerSGD_hook
    elif name == "post_local_sgd":
        start = take(options, "start_local_sgd_iter", int, 1000, "start_localSGD_iter")
        if "subgroup_size" not in options:
            refuse("give post_local_sgd's subgroup_size (volt's default, the cluster's node, is not known here)")
        state = post_localSGD_hook.PostLocalSGDState(
            process_group=None, subgroup=subgroup_of_size(int(options.pop("subgroup_size"))),
            start_localSGD_iter=start,
            post_local_gradient_allreduce=take(options, "post_local_gradient_allreduce", as_bool, True))
        hook = post_localSGD_hook.post_localSGD_hook
        averager = averager_of(options, start)
    else:
        refuse(f"no PyTorch counterpart for comm_hook={name}")
    if wrapper == "fp16":
        hook = default_hooks.fp16_compress_wrapper(hook)
    elif wrapper == "bf16":
        hook = default_hooks.bf16_compress_wrapper(hook)
    elif wrapper != "none":
        refuse(f"comm_wrapper is none, fp16 or bf16, got '{wrapper}'")
    if emulated_bfloat16:
        # register_comm_hook refuses a hook named bf16_compress_hook or bf16_compress_wrapper_hook
        # without CUDA and NCCL (the name is all it checks); the same hook under another name.
        bfloat16_hook = hook

        def bf16_over_emulated_gloo(hook_state, bucket):
            return bfloat16_hook(hook_state, bucket)

        hook = bf16_over_emulated_gloo
    return state, hook, averager


def run_case(rank, args, index, spec, optimizer_name, model_kind, initial_file):
    name, options = worker_problem.parse_strategy(spec)
    if name != "ddp":
        refuse(f"this reference is PyTorch's DistributedDataParallel, for --strategy ddp; got '{name}'")
    if model_kind != "mlp":
        refuse(f"the model is mlp, got '{model_kind}'")
    model = RegressionMlp()
    names = [n for n, _ in model.named_parameters()]
    worker_problem.load_initial(model, initial_file)
    ddp_arguments = dict(
        static_graph=take(options, "static_graph", as_bool, False),
        gradient_as_bucket_view=take(options, "gradient_as_bucket_view", as_bool, False),
        find_unused_parameters=take(options, "find_unused_parameters", as_bool, False),
        bucket_cap_mb=take(options, "bucket_cap_mb", float, 25.0))
    state, hook, averager = hook_of(options)
    if options:
        refuse(f"ddp: options not mapped to PyTorch: {sorted(options)}")
    wrapped = torch.nn.parallel.DistributedDataParallel(model, **ddp_arguments)
    if hook is not None:
        wrapped.register_comm_hook(state, hook)
    optimizer_class, optimizer_arguments = worker_problem.optimizer_of(optimizer_name)
    optimizer = optimizer_class(wrapped.parameters(), **optimizer_arguments)
    if averager is not None:
        from torch.distributed.optim import PostLocalSGDOptimizer

        optimizer = PostLocalSGDOptimizer(optim=optimizer, averager=averager)
    worker_problem.train(rank, args, index, wrapped, optimizer, lambda optimizer: None,
                         lambda: worker_problem.local_parameters(wrapped, names))


if __name__ == "__main__":
    worker_problem.main(run_case)
