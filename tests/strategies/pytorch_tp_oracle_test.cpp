// PyTorch's tensor parallelism as the oracle of volt's tensor_parallel: `--strategy
// tensor_parallel:tp=2,plan=body.0:colwise|body.2:rowwise` selected by name in volt's Trainer (the
// distributed worker's --mode train: the regression MLP, SGD with momentum or Adam, 2 epochs, batch
// 4 per data-parallel replica), against torch.distributed.tensor.parallel.parallelize_module with
// ColwiseParallel() and RowwiseParallel() (PyTorch's defaults) on the "tp" dimension of a CPU
// DeviceMesh (dp = world / tp, tp) over Gloo (tests/strategies/python/pytorch_tp_reference.py, which
// maps every key a case names and refuses one it cannot). body.0 (Linear(8,4)) is cut on its
// output features, its output left sharded; body.2 (Linear(4,4)) on its input features, its output
// all-reduced; the rest replicated. The ranks of one tensor-parallel group see the same batches;
// with 4 ranks (2 replicas of 2) every gradient is averaged over the data-parallel group, as DDP
// averages it, or with data_parallel=fsdp the model is FSDP2's fully_shard over "dp" after
// parallelize_module (reshard_after_forward=False). Every rank's full parameters after every optimizer step (PyTorch's sharded ones
// gathered with DTensor.full_tensor()), the rank, step and parameter named on a failure. The step
// counts: 32 on 2 ranks (one replica: all 64 samples per epoch), 16 on 4 (2 replicas of 32).
//
// Against PyTorch 2.x only (reference_python(): the PyTorch of this build's LibTorch): 1.13 has no
// DTensor, so the 1.13 build tree skips this (the reference refuses 2.0 and 2.1, whose
// ColwiseParallel and RowwiseParallel had other defaults).
//
// What runs on the CPU: all of what PyTorch's tensor parallelism does here, unpatched. A CPU
// DeviceMesh over Gloo; distribute_tensor's scatter and broadcast, RowwiseParallel's Partial ->
// Replicate all-reduce and full_tensor()'s all-gather are Gloo's collectives. The average over the
// replicas is by hand (each gradient's local tensor times 1/2, then all-reduced over the replica's
// group: the arithmetic of DDP's reducer without a comm hook; on 2 replicas any mean's bits).
//
// The tolerance, 1e-6 relative, and what it asks of volt's arithmetic. Not one process's: the
// rowwise all-reduce adds the ranks' partial products, and PyTorch 2.11 puts the replicated bias
// into them as DTensor's Replicate -> Partial does, divided by tp on every rank: body.2's output
// is (x0 W0^T + b/2) + (x1 W1^T + b/2) (measured: a one-process run computing body.2 that way, and
// averaging the replicas' gradients as above, is the reference's run bit for bit, every step, both
// optimizers, on 2 and 4 ranks). Every sum here is of two values, which no order changes: a volt
// that splits the bias as PyTorch does can reproduce the reference's bits. Another placement of the
// bias changes the last bit of some outputs at step 1, and SGD with momentum carries such
// differences far on this problem. Measured from the worker's own INITIAL (seed 3), one process
// computing body.2 otherwise: with the bias added after the all-reduce it ends 2.8e-5 relative from
// the 2-rank reference after 32 steps (over 1e-6 from step 15) and 8.3e-7 from the 4-rank one after
// 16; with body.2 in one piece (volt's single_device with batch 4, bit for bit PyTorch's one
// process under momentum) 1.4e-5 and 4.8e-7; under Adam at most 6e-8. From eight PyTorch
// initializations momentum reaches 2.8e-5 on 2 ranks and 5.3e-6 on 4, Adam 1.8e-7. Within 1e-6
// therefore means volt computes what PyTorch computes, not only the same mathematics.
//
// With dropout (--model mlp_dropout, plan body.1:colwise|body.3:rowwise): the masks fall on the
// inputs and the body's output, which every tp rank holds whole, drawn from generators seeded alike
// as fit starts on both sides; bitwise under momentum on 4 ranks, within 9e-8 under Adam on 2.
//
// Left out (the reference refuses them): styles other than colwise and rowwise (SequenceParallel,
// PrepareModuleInput/Output, loss parallelism), layouts other than ColwiseParallel's and
// RowwiseParallel's defaults, and a plan path that names no module or a module that is no Linear.
#include <gtest/gtest.h>

#include "tests/strategies/reference_runs.h"

namespace volt::testing {
namespace {

const std::string kColwiseThenRowwise = "tensor_parallel:tp=2,plan=body.0:colwise|body.2:rowwise";

void expect_volt_trains_like_pytorch_tp(int64_t world, const std::vector<ReferenceCase>& cases) {
  if (reference_torch_version().rfind("2.", 0) != 0) {
    GTEST_SKIP() << "tensor parallelism (torch.distributed.tensor.parallel) is PyTorch 2.x's; this build's reference "
                 << "PyTorch is " << reference_torch_version()
                 << " (the build against PyTorch 2.11's LibTorch, tools/setup_pytorch2.sh, runs this)";
  }
  expect_volt_trains_like({"PyTorch " + reference_torch_version() + " tensor parallelism", reference_python(),
                           "pytorch_tp_reference.py"},
                          world, cases);
}

// The MLP with dropout (--model mlp_dropout: its Linears are body.1 and body.3), the masks drawn on
// activations every rank of the tp group holds whole.
const std::string kWithDropout = "tensor_parallel:tp=2,plan=body.1:colwise|body.3:rowwise";

TEST(TensorParallelEqualsPyTorchTP, ColwiseThenRowwiseOnOneGroupOfTwoRanks) {
  expect_volt_trains_like_pytorch_tp(2, {{kColwiseThenRowwise, "momentum"},
                                         {kColwiseThenRowwise, "adam"},
                                         {kWithDropout, "adam", "mlp_dropout"}});
}

TEST(TensorParallelEqualsPyTorchTP, ColwiseThenRowwiseOnTwoReplicasOfTwoRanks) {
  expect_volt_trains_like_pytorch_tp(4, {{kColwiseThenRowwise, "momentum"}, {kWithDropout, "momentum", "mlp_dropout"}});
}

// data_parallel=fsdp against FSDP2's fully_shard over "dp" of the tensor-parallel model (2-D:
// Lightning's ModelParallelStrategy, torchtitan's FSDP + TP).
TEST(TensorParallelEqualsPyTorchTP, ColwiseThenRowwiseOnTwoReplicasShardedByFullyShard) {
  const std::string sharded = "tensor_parallel:tp=2,data_parallel=fsdp,plan=body.0:colwise|body.2:rowwise";
  expect_volt_trains_like_pytorch_tp(4, {{sharded, "momentum"}, {sharded, "adam"}});
}

}  // namespace
}  // namespace volt::testing
