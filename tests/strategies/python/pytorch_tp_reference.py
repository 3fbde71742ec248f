"""PyTorch 2.x's tensor parallelism (parallelize_module with ColwiseParallel / RowwiseParallel) as the
oracle of volt's `tensor_parallel` strategy (tests/strategies/pytorch_tp_oracle_test.cpp).

  PYTHON pytorch_tp_reference.py --world N [--epochs 2] [--batch-size 4] [--port P]
      --case SPEC;OPTIMIZER;MODEL;INITIAL [--case ...]

MODEL is mlp, or mlp_dropout (a Dropout(0.2) first and last in the body, on activations every tp
rank holds whole; its Linears are body.1 and body.3): every rank draws the same masks, from its
default generator seeded as volt's Trainer seeds it (worker_problem.train).

PYTHON is the PyTorch 2.x of a build against a PyTorch wheel's LibTorch (testing::reference_python:
`env PYTHONPATH=.deps/pytorch2 /usr/bin/python3`). PyTorch 1.13 has no DTensor, and before 2.2
ColwiseParallel and RowwiseParallel had other arguments and defaults: both are refused.

SPEC is volt's --strategy `tensor_parallel:...` text; each key becomes what PyTorch does for it:
  tp=T (required)
        the ranks form the 2-D mesh init_device_mesh("cpu", (N / T, T), mesh_dim_names=("dp", "tp")):
        T consecutive ranks are one tensor-parallel group (mesh["tp"]), the N / T groups are the
        data-parallel replicas (mesh["dp"]: the ranks with the same place in their groups), as
        volt forms them. Every rank of a group sees the same batches: worker_problem.train's
        DistributedSampler over N / T replicas, replica rank // T, batch --batch-size per replica.
  plan=PATH:STYLE|PATH:STYLE|... (required)
        parallelize_module(model, mesh["tp"], {PATH: STYLE(), ...}), STYLE colwise (ColwiseParallel())
        or rowwise (RowwiseParallel()), both with PyTorch's defaults: colwise shards a Linear's
        weight and bias on dim 0, takes its input replicated and leaves its output sharded on the
        last dim as a local tensor; rowwise shards the weight on dim 1, replicates the bias, takes
        its input sharded on the last dim (a local tensor) and all-reduces its output (a replicated
        local tensor). A PATH is dotted module names, a component `*` matching any one name;
        parallelize_module matches each component with fnmatch, under which a lone `*` is the same.
        Refused here, though PyTorch would run them: a component with other wildcard characters
        (fnmatch's `b*`, `?`, `[..]` are no volt syntax), a PATH that matches no module (PyTorch
        warns and skips it), one that matches a module that is not a Linear (PyTorch raises), a
        module two PATHs match (PyTorch would shard it twice), and any other style.
  data_parallel=ddp|fsdp (default ddp)
        how the replicas (mesh["dp"]) share the model: the mean below, or FSDP2's
        fully_shard(model, mesh=mesh["dp"], reshard_after_forward=False) of the tensor-parallel
        model (2-D DTensors, Lightning's ModelParallelStrategy), whose reduce-scatter averages the
        gradients into the dp shards; full_tensor() then gathers over both dimensions.
A key this script does not map is refused (SystemExit): the oracle never ignores an option.

Gradient averaging over the data-parallel replicas (N / T > 1). After backward, before the
optimizer's step, every gradient's local tensor (a DTensor's shard, or a plain tensor) is multiplied
by 1 / (N / T) and all-reduced (sum) over this rank's mesh["dp"] group, in parameter order: what
PyTorch's DDP does without a comm hook (its reducer copies each gradient into the bucket times
1 / world size, then all-reduces the bucket's sum), done by hand rather than by DDP around the
DTensor model, so that what is summed is in plain sight; every replicated parameter's gradient is
the same on the ranks of a tensor-parallel group, so the groups stay replicas (measured: every rank
of a group prints the same bits at every step). On 2 replicas dividing before the sum or after it
are the same bits (exact halvings), and a sum of two values does not depend on its order: any mean
over 2 replicas is this one.

What runs on the CPU over Gloo: everything PyTorch does here, unpatched. DTensor's collectives on a
CPU DeviceMesh (distribute_tensor's scatter or broadcast from the group's first rank, RowwiseParallel's
Partial -> Replicate all-reduce of its output, full_tensor()'s all-gather) are Gloo's; the
redistributions PyTorch issues with async_op=True are waited for when the value is used. Nothing of
PyTorch is replaced.

Arithmetic that is not one process's. RowwiseParallel's output is a Partial DTensor: each rank's
x_local @ W_local^T plus a share of the bias, summed by the all-reduce. DTensor's addmm puts the
replicated bias into the partial sum (Replicate -> Partial, Partial._partition_value: the bias
divided by T on every rank), so the output is (x0 W0^T + b/T) + (x1 W1^T + b/T) + ... in Gloo's
order, not one process's x W^T + b. Measured (PyTorch 2.11, tp=2): one process computing body.2 as
addmm(b/2, x0, W0^T) + addmm(b/2, x1, W1^T), and averaging 2 replicas' gradients as above, is this
script's run bit for bit, every step, both optimizers, on 2 and 4 ranks; computing body.2 in one
piece changes the last bit of some values at step 1, which SGD with momentum carries to ~1e-5
relative after 32 steps (the C++ test's header gives the numbers).

The problem (data, order, loss, optimizers, the CASE K STEP lines: every rank's full parameters
after every step, a sharded DTensor gathered with full_tensor(), a collective every rank runs in the
same order) is worker_problem.py's.
"""
import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import worker_problem  # noqa: E402
from worker_problem import refuse, take  # noqa: E402

TORCH_VERSION = tuple(int(part) for part in torch.__version__.split("+")[0].split(".")[:2])
WILDCARD_CHARACTERS = "*?[]"


def tensor_parallel_api():
    """(DTensor, {style: class}, parallelize_module) from wherever this PyTorch keeps them."""
    if TORCH_VERSION < (2, 2):
        refuse(f"tensor parallelism (ColwiseParallel, RowwiseParallel as 2.2 on define them) needs PyTorch "
               f">= 2.2; this is {torch.__version__}")
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # before 2.4 it lived under _tensor
        from torch.distributed._tensor import DTensor
    return DTensor, {"colwise": ColwiseParallel, "rowwise": RowwiseParallel}, parallelize_module


def as_tp(value):
    if not value.isdigit() or int(value) < 1:
        refuse(f"tp is a whole number >= 1, got '{value}'")
    return int(value)


def matches(path, name):
    """Whether module `name` (dotted) is what plan `path` names (`*` one component)."""
    wanted, have = path.split("."), name.split(".") if name else []
    return len(wanted) == len(have) and all(w in ("*", h) for w, h in zip(wanted, have))


def plan_of(model, text, styles):
    """{PATH: style instance} for parallelize_module, from volt's plan=PATH:STYLE|...; refuses what
    volt's plan means otherwise or PyTorch would skip (see the top)."""
    plan, taken = {}, {}
    for entry in text.split("|"):
        path, separator, style = entry.rpartition(":")
        if not separator or not path:
            refuse(f"a plan entry is PATH:STYLE, got '{entry}'")
        if style not in styles:
            refuse(f"no PyTorch style mapped for '{style}' (colwise or rowwise) in '{entry}'")
        if path in plan:
            refuse(f"the plan names '{path}' twice")
        for component in path.split("."):
            if component != "*" and (not component or any(c in component for c in WILDCARD_CHARACTERS)):
                refuse(f"'{path}': a path component is a module's name or '*', got '{component}'")
        named = [(name, module) for name, module in model.named_modules() if matches(path, name)]
        if not named:
            refuse(f"'{path}' names no module of the model (PyTorch would skip it with a warning)")
        for name, module in named:
            if not isinstance(module, torch.nn.Linear):
                refuse(f"'{path}' names {name}, a {type(module).__name__}: {style} is mapped for Linear only")
            if name in taken:
                refuse(f"{name} is named by both '{taken[name]}' and '{path}'")
            taken[name] = path
        plan[path] = styles[style]()
    return plan


class DataParallelMean:
    """`optimizer` whose step first makes every gradient the mean over this rank's data-parallel group
    (DDP's arithmetic: times 1 / size, then the sum; see the top)."""

    def __init__(self, optimizer, parameters, group, size, dtensor):
        self.optimizer, self.parameters, self.group, self.size, self.dtensor = (optimizer, parameters, group, size,
                                                                                dtensor)

    def zero_grad(self):
        self.optimizer.zero_grad()

    def step(self):
        with torch.no_grad():
            for p in self.parameters:
                if p.grad is None:
                    continue
                local = p.grad.to_local() if isinstance(p.grad, self.dtensor) else p.grad
                local.mul_(1.0 / self.size)
                dist.all_reduce(local, group=self.group)
        self.optimizer.step()


def as_data_parallel(value):
    if value not in ("ddp", "fsdp"):
        refuse(f"data_parallel is ddp or fsdp, got '{value}'")
    return value


def full_parameters(model, names, dtensor):
    """This rank's full parameters: a DTensor's gathered from its tensor-parallel group (full_tensor, a
    collective), a plain one as it is."""
    state = dict(model.named_parameters())
    return torch.cat([(state[n].full_tensor() if isinstance(state[n], dtensor) else state[n]).detach().reshape(-1)
                      .double() for n in names])


def run_case(rank, args, index, spec, optimizer_name, model_kind, initial_file):
    DTensor, styles, parallelize_module = tensor_parallel_api()
    from torch.distributed.device_mesh import init_device_mesh

    name, options = worker_problem.parse_strategy(spec)
    if name != "tensor_parallel":
        refuse(f"this reference is PyTorch's tensor parallelism, for --strategy tensor_parallel; got '{name}'")
    tp = take(options, "tp", as_tp, None)
    plan_text = take(options, "plan", str, None)
    data_parallel = take(options, "data_parallel", as_data_parallel, "ddp")
    if tp is None or plan_text is None:
        refuse(f"give tp and plan (volt's defaults are not this script's to guess): '{spec}'")
    if options:
        refuse(f"tensor_parallel: options not mapped to PyTorch's tensor parallelism: {sorted(options)}")
    if args.world % tp != 0:
        refuse(f"tp={tp} does not divide the {args.world} ranks")
    replicas = args.world // tp

    model = worker_problem.mlp_of(model_kind)
    names = [n for n, _ in model.named_parameters()]
    worker_problem.load_initial(model, initial_file)
    plan = plan_of(model, plan_text, styles)
    mesh = init_device_mesh("cpu", (replicas, tp), mesh_dim_names=("dp", "tp"))
    model = parallelize_module(model, mesh["tp"], plan)
    sharded = replicas > 1 and data_parallel == "fsdp"
    if sharded:
        try:
            from torch.distributed.fsdp import fully_shard
        except ImportError:
            refuse(f"PyTorch {torch.__version__} has no torch.distributed.fsdp.fully_shard (FSDP2)")
        fully_shard(model, mesh=mesh["dp"], reshard_after_forward=False)
    optimizer_class, optimizer_arguments = worker_problem.optimizer_of(optimizer_name)
    optimizer = optimizer_class(model.parameters(), **optimizer_arguments)
    if replicas > 1 and not sharded:
        optimizer = DataParallelMean(optimizer, list(model.parameters()), mesh["dp"].get_group(), replicas, DTensor)
    worker_problem.train(rank, args, index, model, optimizer, lambda optimizer: None,
                         lambda: full_parameters(model, names, DTensor), replicas=replicas)


if __name__ == "__main__":
    worker_problem.main(run_case)
