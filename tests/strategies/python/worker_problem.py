"""The distributed worker's training problem, in PyTorch, for the reference scripts beside it.

tests/distributed/worker --mode train (--model mlp, --print-steps) trains a regression MLP through
volt's Trainer; a reference script trains the same problem with another implementation of the
strategy and prints the same STEP lines, so that the C++ test (tests/strategies/reference_runs.h)
can compare every rank after every step. What the problem is lives here, once; what differs per
reference is how a strategy spec becomes a wrapped model and an optimizer (its `build`).

  SCRIPT --world N [--epochs 2] [--batch-size 4] [--port P] --case SPEC;OPTIMIZER;MODEL;INITIAL ...

For each case in turn, on the same N processes over Gloo (one start for every case: importing
PyTorch is most of a run): the 64 samples of regression_dataset(seed 7) in
DistributedSampler(shuffle=False) order, batch --batch-size per rank (per data-parallel replica
where several ranks share batches: train's `replicas`, `replica`), mean squared error, SGD
(lr 0.05, momentum 0.9) or Adam (lr 0.01), from the initial parameters in INITIAL (volt's INITIAL
line's comma-separated values, in named_parameters order). After every optimizer step each rank
prints "CASE K STEP rank=R step=S params=P0,P1,..." (K the case's index; 17 digits, one write:
below PIPE_BUF), its own full parameters (under local SGD the ranks' models differ).
"""
import argparse
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

FEATURES, HIDDEN, SAMPLES = 8, 4, 64
WORKER_SEED = 3  # the worker's --seed (tests/distributed/worker_runs.h train_command)
OPTIMIZERS = {"momentum": (torch.optim.SGD, dict(lr=0.05, momentum=0.9)), "adam": (torch.optim.Adam, dict(lr=0.01))}


def refuse(message):
    """Ends the run: a reference that cannot follow a case must not train something else."""
    raise SystemExit(f"{os.path.basename(sys.argv[0])}: {message}")


class RegressionMlp(torch.nn.Module):
    """The worker's --model mlp (tests/support/regression_problem.cpp); with `dropout`, its --model
    mlp_dropout: Dropout(dropout) first and last in the body (the Linears are then body.1 and body.3)."""

    def __init__(self, dropout=0.0):
        super().__init__()
        layers = [torch.nn.Linear(FEATURES, HIDDEN), torch.nn.Tanh(), torch.nn.Linear(HIDDEN, HIDDEN), torch.nn.Tanh()]
        if dropout > 0:
            layers = [torch.nn.Dropout(dropout)] + layers + [torch.nn.Dropout(dropout)]
        self.body = torch.nn.Sequential(*layers)
        self.linear = torch.nn.Linear(HIDDEN, 1)

    def forward(self, x):
        return self.linear(self.body(x))


# The worker's --model kinds of the MLP that a reference may build: their body's dropout.
MLP_DROPOUT = {"mlp": 0.0, "mlp_dropout": 0.2}


def mlp_of(model_kind):
    """The RegressionMlp of the worker's --model `model_kind` (mlp or mlp_dropout)."""
    if model_kind not in MLP_DROPOUT:
        refuse(f"the model is one of {sorted(MLP_DROPOUT)}, got '{model_kind}'")
    return RegressionMlp(MLP_DROPOUT[model_kind])


def regression_dataset(seed=7):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(SAMPLES, FEATURES, generator=generator)
    w = torch.randn(FEATURES, 1, generator=generator)
    y = x.matmul(w) + 0.1 * torch.randn(SAMPLES, 1, generator=generator)
    return x, y


def parse_strategy(spec):
    """volt's --strategy text: 'name:key=value,key=value' -> (name, {key: value}). As volt reads it
    (core/option_spec.h), a piece without '=' continues the previous value: 'periods=2:2,4:4'."""
    name, _, rest = spec.partition(":")
    options, key = {}, None
    for item in filter(None, rest.split(",")):
        if "=" in item:
            key, _, value = item.partition("=")
            options[key] = value
        elif key is None:
            refuse(f"'{item}' in '{spec}' is no key=value")
        else:
            options[key] += "," + item
    return name, options


def take(options, key, convert, default, *aliases):
    """Removes `key` (or one of its aliases; giving two of them is refused) from `options`, converted."""
    given = [k for k in (key,) + aliases if k in options]
    if len(given) > 1:
        refuse(f"{given} are one option; give it once")
    return convert(options.pop(given[0])) if given else default


def as_bool(value):
    if value not in ("true", "false"):
        refuse(f"expected true or false, got '{value}'")
    return value == "true"


def load_initial(model, path):
    """Copies the flat values in `path` into `model`'s parameters, in named_parameters order."""
    with open(path) as f:
        initial = torch.tensor([float(v) for v in f.read().strip().split(",")], dtype=torch.float64)
    offset = 0
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(initial[offset:offset + p.numel()].view_as(p))
            offset += p.numel()
    if offset != initial.numel():
        refuse(f"{path} has {initial.numel()} values, the model {offset}")


def optimizer_of(name):
    """(class, keyword arguments) of the worker's --optimizer `name`."""
    if name not in OPTIMIZERS:
        refuse(f"the optimizer is momentum or adam, got '{name}'")
    return OPTIMIZERS[name]


def local_parameters(wrapped, names):
    """This rank's parameters of a replicated model (DDP-like: the plain model is `.module`)."""
    module = wrapped.module if hasattr(wrapped, "module") else wrapped
    state = dict(module.named_parameters())
    return torch.cat([state[n].detach().reshape(-1).double() for n in names])


def train(rank, args, index, wrapped, optimizer, after_step, parameters, replicas=None, replica=None,
          forward_backward=None):
    """The worker's loop: every batch one optimizer step, then this rank's STEP line.
    `parameters()` returns this rank's whole flat parameters (a collective where they are sharded).
    `replicas`: how many data-parallel replicas the ranks form, each a block of world / replicas
    consecutive ranks that see the same batches (tensor parallelism: replica rank // tp of world /
    tp); by default every rank is a replica of its own (DistributedSampler(world, rank)).
    `replica`: this rank's replica where the replicas are not blocks of consecutive ranks (a
    pipeline's: rank % replicas); by default rank // (world / replicas).
    `forward_backward(inputs, targets)`: what runs between zero_grad and the optimizer's step (a
    pipeline schedule's step, which runs forward, loss and backward itself); by default the mean
    squared error of `wrapped(inputs)` and its backward."""
    x, y = regression_dataset()
    dataset = torch.utils.data.TensorDataset(x, y)
    replicas = args.world if replicas is None else replicas
    if replicas < 1 or args.world % replicas != 0:
        refuse(f"{args.world} ranks do not split into {replicas} data-parallel replicas")
    replica = rank // (args.world // replicas) if replica is None else replica
    if not 0 <= replica < replicas:
        refuse(f"replica {replica} is not one of the {replicas} data-parallel replicas")
    sampler = torch.utils.data.distributed.DistributedSampler(dataset, num_replicas=replicas, rank=replica,
                                                              shuffle=False)
    # A generator of its own: each epoch's iterator draws a seed from it, which from the default
    # generator would shift every dropout mask after it (volt's loader draws none).
    loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch_size, sampler=sampler,
                                         generator=torch.Generator())
    # volt's Trainer seeds every rank's default generator with --seed as fit starts (the worker's
    # 3, train_command), and nothing draws from it before the first forward: so do the same here,
    # and every rank's dropout draws what that rank of volt's draws, in the same order.
    torch.manual_seed(WORKER_SEED)
    step = 0
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for inputs, targets in loader:
            optimizer.zero_grad()
            if forward_backward is None:
                loss = (wrapped(inputs) - targets).square().mean()
                loss.backward()
            else:
                forward_backward(inputs, targets)
            optimizer.step()
            after_step(optimizer)
            step += 1
            values = parameters()
            line = f"CASE {index} STEP rank={rank} step={step} params=" + ",".join(f"{v:.17g}" for v in values.tolist())
            os.write(1, (line + "\n").encode())


def _run(rank, args, run_case, after_init):
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(args.port)
    dist.init_process_group("gloo", rank=rank, world_size=args.world)
    after_init()
    for index, case in enumerate(args.case):
        fields = case.split(";")
        if len(fields) != 4:
            refuse(f"a case is SPEC;OPTIMIZER;MODEL;INITIAL, got '{case}'")
        run_case(rank, args, index, *fields)
        dist.barrier()
    dist.destroy_process_group()


def main(run_case, after_init=lambda: None):
    """Parses the command line and runs every case on --world processes: `run_case(rank, args, index,
    spec, optimizer, model, initial_file)` in each, after the process group and `after_init()`."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--world", type=int, required=True)
    parser.add_argument("--case", action="append", required=True, help="SPEC;OPTIMIZER;MODEL;INITIAL")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--port", type=int, default=29761)
    args = parser.parse_args()
    torch.set_num_threads(1)
    # fork: the children start with torch imported (spawn would import it once more in each).
    mp.start_processes(_run, args=(args, run_case, after_init), nprocs=args.world, start_method="fork")
