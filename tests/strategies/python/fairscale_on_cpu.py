"""What fairscale 0.4.13 needs to run on the CPU over Gloo, and nothing else.

fairscale's OSS and ShardedDataParallel run on the CPU as they are. Its SlowMo and FSDP were
written for CUDA and NCCL; without this module they stop before their first step:

* SlowMoDistributedDataParallel: "AssertionError: Torch not compiled with CUDA enabled" (PyTorch
  1.13) from torch.cuda.synchronize() in gossip/utils/helpers.py create_process_group; PyTorch
  2.11 fails the same call for want of a driver.
* FullyShardedDataParallel: "AssertionError: Torch not compiled with CUDA enabled" from
  _init_param_attributes (compute_device defaults to CUDA); given compute_device=cpu, a KeyError
  'all_gather' (its CUDA streams exist only where CUDA is available); then "no support for
  _allgather_base in Gloo process group"; Gloo has no reduce_scatter either.

What this module changes, and why the arithmetic stays fairscale's own:
* CUDA streams, events and synchronization become no-ops. They order work on a GPU; on the CPU
  every operation has finished when its call returns, so there is nothing to order.
* FSDP is told that the "base" collectives are missing (fairscale's own switch for old PyTorch),
  so it gathers with dist.all_gather over chunks.
* dist.reduce_scatter, which Gloo lacks, is an all_reduce of the concatenated inputs of which
  each rank keeps its chunk: every element is the same sum over the ranks.

Nothing else is touched: the models, optimizers, sharding, bucketing and averaging are fairscale's.
"""
import contextlib

import torch
import torch.distributed as dist


class _SynchronousStream:
    """A CUDA stream where every operation is already done: waits and records are no-ops."""

    def __init__(self, *args, **kwargs):
        pass

    def wait_stream(self, other):
        pass

    def wait_event(self, event):
        pass

    def record_event(self, event=None):
        return None

    def synchronize(self):
        pass

    def __eq__(self, other):
        return isinstance(other, _SynchronousStream)

    __hash__ = object.__hash__


_CURRENT_STREAM = _SynchronousStream()


def cuda_streams_as_no_ops():
    torch.cuda.Stream = _SynchronousStream
    torch.cuda.current_stream = lambda *args, **kwargs: _CURRENT_STREAM
    torch.cuda.stream = lambda stream: contextlib.nullcontext()
    torch.cuda.synchronize = lambda *args, **kwargs: None
    torch.Tensor.record_stream = lambda self, stream: None


def _reduce_scatter_through_all_reduce(output, inputs, op=dist.ReduceOp.SUM, group=None, async_op=False):
    assert not async_op, "fairscale's FSDP waits for its reduce-scatter"
    total = torch.cat([t.reshape(-1) for t in inputs])
    dist.all_reduce(total, op=op, group=group)
    rank, count = dist.get_rank(group), inputs[0].numel()
    output.copy_(total[rank * count:(rank + 1) * count].view_as(output))


def fsdp_on_gloo():
    """FSDP's streams exist (as no-ops), and its collectives are ones Gloo has. Idempotent."""
    import fairscale.internal.reduce_scatter_bucketer as bucketer_module
    import fairscale.nn.data_parallel.fully_sharded_data_parallel as fsdp_module

    if getattr(fsdp_module, "_on_gloo", False):
        return
    fsdp_module._on_gloo = True
    fsdp_module.enable_nccl_base_collectives = False
    bucketer_module.enable_nccl_base_collectives = False
    dist.reduce_scatter = _reduce_scatter_through_all_reduce

    setup_streams = fsdp_module.FullyShardedDataParallel._setup_streams

    def setup_streams_without_cuda(self):
        setup_streams(self)  # creates the streams only where CUDA is available
        if self._is_root:
            for name in ("fp32_to_fp16", "all_gather", "post_backward"):
                self._streams.setdefault(name, _SynchronousStream())

    fsdp_module.FullyShardedDataParallel._setup_streams = setup_streams_without_cuda
