"""One rank of PyTorch's own post-local-SGD, the reference for tests/ddp/post_local_sgd_parity_test.cpp.

DistributedDataParallel with post_localSGD_hook (PostLocalSGDState over dist.new_subgroups) and a
PeriodicModelAverager or HierarchicalModelAverager called after optimizer.step(), as PyTorch's
documentation shows them. The model's initial weights and every rank's batches come from the file
the test wrote (torch::pickle_save), so both sides start from the same numbers.

Usage: post_local_sgd_reference.py RANK WORLD PORT INPUT OUTPUT SUBGROUP_SIZE START PERIODS
  PERIODS  "4" (periodic, period 4) or "2:2,4:4" (hierarchical, period:group_size,...)
  ALLREDUCE (optional, default 1) post_local_gradient_allreduce: 1 or 0
Writes {"params": [steps, parameters] float32 (the flat parameters after every step), "rank"} to OUTPUT.
"""
import sys
from collections import OrderedDict

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import post_localSGD_hook as post_local_sgd
from torch.distributed.algorithms.model_averaging import averagers
from torch.distributed.algorithms.model_averaging import hierarchical_model_averager as hierarchical
from torch.nn.parallel import DistributedDataParallel


def new_subgroups_on_cpu(group_size=None, group=None, **kwargs):
    """dist.new_subgroups(group_size) without its CUDA check.

    PyTorch 1.13's new_subgroups raises "Subgroups can only be created when CUDA is available" before
    doing anything, because its *default* group size is the number of CUDA devices; with a group size
    given, the rest of its body (new_group over every block of consecutive ranks, in order) is the
    same on CPU. This is that body. HierarchicalModelAverager calls dist.new_subgroups too, so it is
    replaced in the module both use.
    """
    world_size = dist.get_world_size()
    assert group_size is not None and world_size % group_size == 0, (group_size, world_size)
    subgroups, mine = [], None
    for first in range(0, world_size, group_size):
        ranks = list(range(first, first + group_size))
        subgroup = dist.new_group(ranks=ranks, **kwargs)
        subgroups.append(subgroup)
        if dist.get_rank() in ranks:
            mine = subgroup
    return mine, subgroups


dist.new_subgroups = new_subgroups_on_cpu


class Net(torch.nn.Module):
    """The twin of tests/ddp/reducer_harness.h's Net (8 -> 16 -> 4, tanh)."""

    def __init__(self):
        super().__init__()
        self.first = torch.nn.Linear(8, 16)
        self.second = torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.second(torch.tanh(self.first(x)))


def main():
    rank, world, port = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    input_path, output_path = sys.argv[4], sys.argv[5]
    subgroup_size, start, periods = int(sys.argv[6]), int(sys.argv[7]), sys.argv[8]
    post_local_gradient_allreduce = len(sys.argv) <= 9 or sys.argv[9] == "1"
    torch.set_num_threads(1)
    # volt's torch::pickle_save of a typed dict: PyTorch 2.6+ would refuse it under its default
    # weights_only=True (restore_type_tag is not a tensor-rebuilding global).
    data = torch.load(input_path, weights_only=False)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    subgroup, _ = dist.new_subgroups(group_size=subgroup_size)
    net = Net()
    net.load_state_dict(data["weights"])
    model = DistributedDataParallel(net)
    state = post_local_sgd.PostLocalSGDState(process_group=None, subgroup=subgroup, start_localSGD_iter=start,
                                             post_local_gradient_allreduce=post_local_gradient_allreduce)
    model.register_comm_hook(state, post_local_sgd.post_localSGD_hook)
    if ":" in periods:
        levels = OrderedDict((int(p), int(g)) for p, g in (level.split(":") for level in periods.split(",")))
        averager = hierarchical.HierarchicalModelAverager(period_group_size_dict=levels, warmup_steps=start)
    else:
        averager = averagers.PeriodicModelAverager(period=int(periods), warmup_steps=start)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    inputs, targets = data["inputs"][rank], data["targets"][rank]
    history = []
    for step in range(inputs.shape[0]):
        optimizer.zero_grad(set_to_none=True)
        loss = (model(inputs[step]) - targets[step]).pow(2).mean()
        loss.backward()
        optimizer.step()
        averager.average_parameters(model.parameters())
        history.append(torch.cat([p.detach().reshape(-1) for p in model.parameters()]))
    # Two entries: Python pickles a one-entry dict with SETITEM, which LibTorch's unpickler lacks.
    torch.save({"params": torch.stack(history), "rank": torch.tensor(rank)}, output_path)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
