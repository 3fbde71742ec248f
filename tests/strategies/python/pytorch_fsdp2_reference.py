"""PyTorch 2.x's FSDP2 (fully_shard) as the oracle of volt's `fsdp` strategy
(tests/strategies/pytorch_fsdp2_oracle_test.cpp).

  PYTHON pytorch_fsdp2_reference.py --world N [--epochs 2] [--batch-size 4] [--port P]
      --case SPEC;OPTIMIZER;MODEL;INITIAL [--case ...]

PYTHON is the PyTorch 2.x of a build against a PyTorch wheel's LibTorch (testing::reference_python:
`env PYTHONPATH=.deps/pytorch2 /usr/bin/python3`); PyTorch 1.13 has no fully_shard and is refused.
MODEL is mlp, or mlp_wrapped (body.2 a unit by hand, as volt's fsdp::wrap there).

SPEC is volt's --strategy `fsdp:...` text (docs/fsdp.md gives volt's keys and defaults); each key
becomes what FSDP2 does for it:
  min_num_params=N (default 100000000; 0: the root unit only)
        the units volt's auto-wrap makes (strategies/fsdp/auto_wrap.cpp, mirrored in units_of:
        children before parents, a child of a Sequential whose parameters not yet in a unit number
        at least N, never a ModuleList or ModuleDict), each fully_shard()ed bottom-up, then the
        root. On the MLP (body.0 Linear(8,4): 36 parameters, body.2 Linear(4,4): 20, linear
        Linear(4,1): 5) N=20 makes body.0 and body.2 units and leaves `linear` to the root, as
        fairscale's auto_wrap with default_auto_wrap_policy(min_num_params=20) does
        (fairscale_reference.py): the same units.
  reshard_after_forward=true|false, sharding_strategy=FULL_SHARD|SHARD_GRAD_OP
        fully_shard(reshard_after_forward=...) (FULL_SHARD is true, SHARD_GRAD_OP false;
        contradicting values are refused, as volt refuses them) on the units below the root. The
        root is fully_shard()ed without the argument: FSDP2 then keeps it gathered from its forward
        to its backward (as volt keeps its root unit: released after backward); given True
        explicitly, 2.11 would reshard the root too and gather it again for backward.
  layout=flat|per_parameter
        volt's storage of a unit's shard: one flat parameter cut into N equal pieces (FSDP1's,
        fairscale's) or each parameter cut on its own (FSDP2's dim-0 sharding). Both map to FSDP2 as
        it is: the arithmetic is the same under either, since every element's gradient is the mean
        over the ranks whichever rank keeps it, and SGD with momentum and Adam step each element
        on its own. (It would not be for an optimizer that reads a whole parameter, e.g. a norm
        per tensor; the worker has none.)
  forward_prefetch=true|false, backward_prefetch=true|false
        scheduling only: a prefetched all-gather copies the same values, earlier. forward_prefetch
        =true: FSDPModule.set_modules_to_forward_prefetch, each unit naming the one that runs after
        it (the units' forward order is their registration order: the MLP's root, body.0, body.2).
        backward_prefetch=true: set_modules_to_backward_prefetch, each unit naming the one whose
        backward comes next (the one before it in forward; PyTorch's BACKWARD_PRE, volt's), which
        is also FSDP2's default; false: FSDP2 still prefetches one unit in backward (it has no
        switch to turn that off: an empty explicit list means its default), which changes when
        the values are copied, not what they are.
  bucket_cap_mb=X
        scheduling only: volt's bucket puts small units' flat gradients into one reduce-scatter,
        each element still the same sum over the ranks (volt's own check: bit for bit the same).
        FSDP2 reduce-scatters each unit's gradients in one collective and has no bucket across
        units: nothing to map it to.
A key this script does not map (wrap, mixed_precision, fp32_reduce_scatter, NO_SHARD,
HYBRID_SHARD, nprocs_per_node, cpu_offload, state_dict_type, activation_checkpointing, ...) is
refused (SystemExit): the oracle never ignores an option.

Gradient averaging. volt reduce-scatters the mean over the ranks split as PyTorch's FSDP1 splits it
(gradient_pre_divide_factor: divided by a power of two before the sum, 2 on 2 and 3 ranks, the rest,
world/2, after). FSDP2 2.11 (_fsdp_collectives._get_gradient_divide_factors) divides nothing
itself for float32 gradients: it reduce-scatters with ReduceOp.AVG, and the pre-/post-divide split
is only for float16 (or with force_sum_reduction_for_comms, which this script does not set).
Gloo implements AVG in 2.11 as the sum divided by the group's size (measured: bitwise SUM / world,
for reduce_scatter_tensor on 2 and 3 ranks). So on 2 ranks (g0/2 + g1/2 versus (g0 + g1)/2, exact
halvings) the two means are the same bits; on 3 ranks they differ in the last bit of some
elements, as do the orders in which the ranks' values are added (Gloo's ring here, volt's
halving-doubling). Both are the mean over the ranks.

What runs on the CPU over Gloo: everything FSDP2 does here, unpatched. fully_shard on a 1-D CPU
DeviceMesh (init_device_mesh("cpu", (N,))); its all-gathers are dist.all_gather_into_tensor and its
reduce-scatters dist.reduce_scatter_tensor with ReduceOp.AVG, which PyTorch 2.11's Gloo implements
(PyTorch 1.13's Gloo had neither the "_base" collectives nor reduce_scatter, which is why
fairscale_on_cpu.py patches fairscale); FSDP2's streams and events on the CPU are
torch.cpu's no-op Stream and Event. Nothing of PyTorch is replaced.

The problem (data, order, loss, optimizers, the CASE K STEP lines: every rank's full parameters
after every step, gathered from the DTensor shards with full_tensor(), a collective every rank
runs in the same order) is worker_problem.py's.
"""
import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import worker_problem  # noqa: E402
from worker_problem import RegressionMlp, as_bool, refuse, take  # noqa: E402

TORCH_VERSION = tuple(int(part) for part in torch.__version__.split(".")[:2])
VOLT_DEFAULT_MIN_NUM_PARAMS = 100000000  # fairscale's default, volt's (FSDPOptions::size_threshold)


def fully_shard_api():
    """(fully_shard, FSDPModule) from wherever this PyTorch keeps them."""
    if TORCH_VERSION < (2, 0):
        refuse(f"FSDP2 (fully_shard) needs PyTorch 2.x; this is {torch.__version__}")
    try:
        from torch.distributed.fsdp import FSDPModule, fully_shard
    except ImportError:  # before 2.6 it lived under _composable
        from torch.distributed._composable.fsdp import FSDPModule, fully_shard
    return fully_shard, FSDPModule


def as_count(value):
    """volt's min_num_params: a whole number, written 20 or 1e5."""
    number = float(value)
    if number != int(number) or number < 0:
        refuse(f"min_num_params is a whole number >= 0, got '{value}'")
    return int(number)


def trainable_elements(module):
    return sum(p.numel() for p in module.parameters() if p.requires_grad)


def units_of(root, min_num_params, by_hand):
    """The modules volt's auto-wrap makes units below `root` (strategies/fsdp/auto_wrap.cpp's
    wrap_below, step for step), children before parents; `by_hand` are units already (fsdp::wrap)."""
    units = []

    def wrap_below(module):
        inside_units = 0
        for child in module.children():
            total = trainable_elements(child)
            inside = total if any(child is unit for unit in by_hand) else wrap_below(child)
            if (isinstance(module, torch.nn.Sequential) and inside < total and total - inside >= min_num_params
                    and not isinstance(child, (torch.nn.ModuleList, torch.nn.ModuleDict))):
                units.append(child)
                inside = total
            inside_units += inside
        return inside_units

    if min_num_params > 0:
        wrap_below(root)
    return units


def resharding_of(options):
    """volt's reshard_after_forward as given or implied by sharding_strategy (FSDPOptions::resharding)."""
    sharding = take(options, "sharding_strategy", str, None)
    reshard = take(options, "reshard_after_forward", as_bool, None)
    if sharding is None:
        return True if reshard is None else reshard
    if sharding not in ("FULL_SHARD", "SHARD_GRAD_OP"):
        refuse(f"no FSDP2 counterpart mapped for sharding_strategy={sharding}")
    implied = sharding == "FULL_SHARD"
    if reshard is not None and reshard != implied:
        refuse(f"sharding_strategy={sharding} contradicts reshard_after_forward={str(reshard).lower()} "
               "(volt refuses it too)")
    return implied


def shard(model, model_kind, options, world):
    """fully_shard()s `model`'s units, then the root, as volt makes them for `options`."""
    fully_shard, _ = fully_shard_api()
    from torch.distributed.device_mesh import init_device_mesh

    min_num_params = take(options, "min_num_params", as_count, VOLT_DEFAULT_MIN_NUM_PARAMS)
    reshard = resharding_of(options)
    layout = take(options, "layout", str, "flat")
    if layout not in ("flat", "per_parameter"):
        refuse(f"layout is flat or per_parameter, got '{layout}'")
    forward_prefetch = take(options, "forward_prefetch", as_bool, False)
    backward_prefetch = take(options, "backward_prefetch", as_bool, False)
    take(options, "bucket_cap_mb", float, 25.0)  # scheduling only (see the top)
    if options:
        refuse(f"fsdp: options not mapped to FSDP2: {sorted(options)}")

    mesh = init_device_mesh("cpu", (world,))
    by_hand = [model.body[2]] if model_kind == "mlp_wrapped" else []
    below_root = by_hand + units_of(model, min_num_params, by_hand)
    for module in below_root:  # children before parents: fully_shard takes what is not in a unit yet
        fully_shard(module, mesh=mesh, reshard_after_forward=reshard)
    # The root without reshard_after_forward: FSDP2 then keeps it gathered from its forward to its
    # backward (FSDPState._lazy_init: a root whose reshard_after_forward was not given), as volt does.
    fully_shard(model, mesh=mesh)
    # Forward order: the root's pre-forward, then the units as registered (the MLP's Sequential calls
    # them in that order).
    order = [model] + [m for m in model.modules() if any(m is unit for unit in below_root)]
    if forward_prefetch:
        for unit, following in zip(order, order[1:]):
            unit.set_modules_to_forward_prefetch([following])
    if backward_prefetch:
        for unit, previous in zip(order[2:], order[1:]):
            unit.set_modules_to_backward_prefetch([previous])
    return model


def full_parameters(model, names):
    """This rank's full parameters, gathered from every rank's DTensor shards (a collective)."""
    state = dict(model.named_parameters())
    return torch.cat([state[n].full_tensor().detach().reshape(-1).double() for n in names])


def run_case(rank, args, index, spec, optimizer_name, model_kind, initial_file):
    name, options = worker_problem.parse_strategy(spec)
    if name != "fsdp":
        refuse(f"this reference is PyTorch's FSDP2, for --strategy fsdp; got '{name}'")
    if model_kind not in ("mlp", "mlp_wrapped"):
        refuse(f"the model is mlp or mlp_wrapped, got '{model_kind}'")
    model = RegressionMlp()
    names = [n for n, _ in model.named_parameters()]
    worker_problem.load_initial(model, initial_file)
    model = shard(model, model_kind, options, args.world)
    optimizer_class, optimizer_arguments = worker_problem.optimizer_of(optimizer_name)
    optimizer = optimizer_class(model.parameters(), **optimizer_arguments)
    worker_problem.train(rank, args, index, model, optimizer, lambda optimizer: None,
                         lambda: full_parameters(model, names))


if __name__ == "__main__":
    worker_problem.main(run_case)
