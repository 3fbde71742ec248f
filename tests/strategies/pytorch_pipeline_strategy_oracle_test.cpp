// PyTorch's torch.distributed.pipelining as the oracle of volt's pipeline strategy: `--strategy
// pipeline:stages=S,microbatches=M,schedule=gpipe|1f1b` selected by name in volt's Trainer (the
// distributed worker's --mode train: the regression MLP, SGD with momentum or Adam, 2 epochs, batch
// 4 per data-parallel replica), against pipelining.PipelineStage under ScheduleGPipe / Schedule1F1B
// (n_microbatches=M, loss_fn the mean squared error, scale_grads=True) on the "pp" dimension of a
// CPU DeviceMesh (pp = S, dp = world / S) over Gloo, each stage wrapped in DistributedDataParallel
// over "dp" when there are several replicas (tests/strategies/python/pytorch_pipeline_strategy_reference.py,
// which maps every key a case names and refuses one it cannot). Both cut the worker's 5 layers
// (body.0, Tanh, body.2, Tanh, linear) as volt's balanced_stage_starts does: S = 2 [body.0 | Tanh,
// body.2, Tanh, linear], S = 3 [body.0 | Tanh | body.2, Tanh, linear]. With 4 ranks and 2 stages,
// rank = stage * 2 + replica: ranks 0 and 2 are one pipeline, 1 and 3 the other, and each stage's
// gradients are averaged over its replicas. Every rank's whole model after every optimizer step
// (PyTorch's stages broadcast over the pipeline), the rank, step and parameter named on a failure.
// The step counts: 32 on 2 and 3 ranks (one pipeline: all 64 samples per epoch), 16 on 4.
//
// With dropout (--model mlp_dropout: a Dropout(0.2) first and last in the body, one on each of 2
// stages): each stage draws from its own process's generator, seeded alike as fit starts on both
// sides; bitwise under momentum (2 stages, both schedules; 2 replicas of 2 stages), within 9e-8
// under Adam. The reference gives PipelineStage its shapes, whose inference at the first step would
// otherwise run a forward and draw masks volt's stages do not.
//
// volt refuses validation under pipeline, so its worker runs here with --limit-val-batches 0 (a
// case's worker_flags in reference_runs.h).
//
// Against PyTorch 2.x only (reference_python(): the PyTorch of this build's LibTorch): 1.13 has no
// torch.distributed.pipelining, so the 1.13 build tree skips this; the reference also refuses a
// PyTorch before 2.7, whose schedules had no scale_grads and summed the micro-batches' gradients.
//
// What runs on the CPU: all of what PyTorch's pipelining does here, unpatched: the stages' shape
// exchange, activations and their gradients are Gloo's batched isend/irecv on the pp group, DDP's
// all-reduce Gloo's on the dp group.
//
// The tolerance, 1e-6 relative. PyTorch runs each micro-batch's backward from its loss and divides
// the summed gradients by M after the step's last backward (scale_grads); volt divides each
// micro-batch's loss by M before its backward. For M = 2 and 4 both divisions are exact in float32,
// so the orders give the same bits. Measured (the worker of the build against PyTorch 2.11's
// LibTorch, from its own INITIAL, seed 3): under SGD with momentum every case below is bitwise the
// reference at every step on every rank, and so are gpipe on 3 ranks (M = 4) and on 4. Under Adam
// the values differ from step 2 on, at most 8.9e-8 relative on 2 ranks (6.0e-8 on 3 ranks, 3.1e-8
// on 4): LibTorch's torch::optim::Adam against Python's torch.optim.Adam, not the pipeline
// (volt's 2-stage Adam run is bitwise its single_device run with batch 2 and
// --accumulate-grad-batches 2, and one Python process taking the same micro-batches with the loss
// divided by M is bitwise the reference). Against the worker of the build on Debian's LibTorch 1.13
// the values differ from step 1, up to 5.3e-5 (momentum, 2 ranks): one process under 1.13 and under
// 2.11 differ by exactly that, the two LibTorches' kernels; which is why this runs on the build
// whose LibTorch is the reference's.
//
// data_parallel=fsdp maps to FSDP2's fully_shard of each stage over "dp" (reshard_after_forward=False),
// its parameters DTensors whose full_tensor() is the whole model.
//
// Interleaved (schedule=interleaved_1f1b,virtual_stages=V) maps to ScheduleInterleaved1F1B over V
// PipelineStages a rank, global stages r, r + S, ...: bitwise under momentum, within 6e-8 under
// Adam (2 ranks, 2 chunks each, M = 4, with and without dropout).
//
// Left out (the reference refuses them): 1f1b with fewer micro-batches than stages (PyTorch's
// Schedule1F1B refuses them; volt's runs them), a stage without parameters beside data parallelism
// (DDP refuses such a module: the middle stage of 3 on 6 ranks), and any key but stages,
// microbatches, schedule and data_parallel. A micro-batch count that is no power of two would round the 1/M in
// another place; no case here has one.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/strategies/reference_runs.h"

namespace volt::testing {
namespace {

void expect_volt_pipeline_trains_like_pytorch(int64_t world, const std::vector<std::string>& specs,
                                              const std::vector<std::string>& optimizers,
                                              const std::vector<std::string>& models = {"mlp"}) {
  if (reference_torch_version().rfind("2.", 0) != 0) {
    GTEST_SKIP() << "torch.distributed.pipelining is PyTorch 2.x's; this build's reference PyTorch is "
                 << reference_torch_version()
                 << " (the build against PyTorch 2.11's LibTorch, tools/setup_pytorch2.sh, runs this)";
  }
  std::vector<ReferenceCase> cases;
  for (const auto& spec : specs) {
    // The pipeline refuses validation steps.
    for (const auto& optimizer : optimizers) {
      for (const auto& model : models) cases.push_back({spec, optimizer, model, "--limit-val-batches 0"});
    }
  }
  expect_volt_trains_like({"PyTorch " + reference_torch_version() + " pipelining", reference_python(),
                           "pytorch_pipeline_strategy_reference.py"},
                          world, cases);
}

TEST(PipelineEqualsPyTorchPipelining, TwoStagesTwoMicroBatchesGPipeAndOneFOneB) {
  const std::string gpipe = "pipeline:stages=2,microbatches=2,schedule=gpipe";
  const std::string one_f_one_b = "pipeline:stages=2,microbatches=2,schedule=1f1b";
  expect_volt_pipeline_trains_like_pytorch(2, {gpipe, one_f_one_b}, {"momentum", "adam"}, {"mlp", "mlp_dropout"});
}

// Interleaved 1F1B against ScheduleInterleaved1F1B: 2 ranks holding 2 chunks each (global stages
// r and r + 2, PyTorch's loop placement), the micro-batches passing both ranks twice. The two
// schedules order the actions differently, but each chunk's backwards run in micro-batch order in
// both, so the gradients are the same sums.
TEST(PipelineEqualsPyTorchPipelining, InterleavedOneFOneBOnTwoRanksOfTwoChunks) {
  expect_volt_pipeline_trains_like_pytorch(2, {"pipeline:stages=2,microbatches=4,schedule=interleaved_1f1b,virtual_stages=2"},
                                           {"momentum", "adam"}, {"mlp", "mlp_dropout"});
}

TEST(PipelineEqualsPyTorchPipelining, ThreeStagesFourMicroBatchesOneFOneB) {
  expect_volt_pipeline_trains_like_pytorch(3, {"pipeline:stages=3,microbatches=4,schedule=1f1b"}, {"momentum"});
}

TEST(PipelineEqualsPyTorchPipelining, TwoReplicasOfTwoStages) {
  expect_volt_pipeline_trains_like_pytorch(4, {"pipeline:stages=2,microbatches=2,schedule=1f1b"}, {"momentum"},
                                           {"mlp", "mlp_dropout"});
}

// data_parallel=fsdp against FSDP2's fully_shard of each stage over its replicas
// (reshard_after_forward=False), torchtitan's composition of pipelining with FSDP.
TEST(PipelineEqualsPyTorchPipelining, TwoReplicasOfTwoStagesShardedByFullyShard) {
  expect_volt_pipeline_trains_like_pytorch(4, {"pipeline:stages=2,microbatches=2,schedule=1f1b,data_parallel=fsdp"},
                                           {"momentum", "adam"});
}

}  // namespace
}  // namespace volt::testing
