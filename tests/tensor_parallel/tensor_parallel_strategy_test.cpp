// `--strategy tensor_parallel` through the Trainer (Note [The tensor_parallel strategy]): the
// distributed worker's MLP (--model mlp: body.0 Linear(8,4), Tanh, body.2 Linear(4,4), Tanh, then
// linear Linear(4,1)) with body.0 split column-wise and body.2 row-wise, on processes started by
// volt's launcher, against one process and ddp after every step on every rank (each rank's whole
// model, gathered), within 5e-6: the rowwise linear sums the ranks' partial products, in another
// order than one process's dot product, and momentum carries those last bits (measured 1.6e-6
// relative after 16 SGD steps with momentum, 6e-8 without). Its checkpoints resumed across strategies; its refusals.
#include <gtest/gtest.h>

#include "tests/distributed/worker_runs.h"
#include "tests/support/regression_problem.h"

namespace volt {
namespace {

using testing::StepParameters;

const std::string kPlan = "plan=body.0:colwise|body.2:rowwise";

StepParameters tp_worker_steps(const std::string& flags, const std::string& model = "mlp") {
  testing::TemporaryDirectory dir;
  const auto result =
      testing::run_command(testing::train_command(dir.path(), "--model " + model + " --print-steps " + flags), 240);
  EXPECT_EQ(result.exit_code, 0) << flags << ":\n" << result.output;
  return testing::step_lines(result.output);
}

// `reference`'s ranks as every rank of `ranks`, rank r taking reference rank r / per_reference.
StepParameters spread(const StepParameters& reference, int64_t ranks, int64_t per_reference) {
  StepParameters every;
  for (int64_t r = 0; r < ranks; ++r) {
    auto found = reference.find(r / per_reference);
    if (found != reference.end()) every[r] = found->second;
  }
  return every;
}

TEST(TensorParallelStrategy, TwoRanksEqualOneProcessOnTheSameBatches) {
  for (const std::string optimizer : {"momentum", "adam"}) {
    const auto one = tp_worker_steps("--strategy single_device --batch-size 8 --optimizer " + optimizer);
    ASSERT_EQ(one.size(), 1u);
    ASSERT_EQ(one.begin()->second.size(), 16u);
    const auto split = tp_worker_steps("--strategy \"tensor_parallel:tp=2," + kPlan +
                                       "\" --devices 2 --batch-size 8 --optimizer " + optimizer);
    testing::expect_steps_close(split, spread(one, 2, 2), 5e-6, "tensor_parallel tp=2 vs one process, " + optimizer);
  }
}

// Dropout on activations every rank of the tp group holds whole (--model mlp_dropout: on the inputs
// and on the body's output, whose Linears are body.1 and body.3): every rank draws the masks one
// process draws, from the same seed in the same order, so the split model trains like the whole one
// with its dropout. (Dropout between a colwise and a rowwise linear would draw each rank's slice of
// the mask from the same generator state, not the slices of one mask: docs/tensor_parallel.md.)
TEST(TensorParallelStrategy, DropoutOnWholeActivationsDrawsOneProcesssMasks) {
  const std::string flags = " --batch-size 8 --optimizer momentum";
  const auto one = tp_worker_steps("--strategy single_device" + flags, "mlp_dropout");
  ASSERT_EQ(one.size(), 1u);
  const auto split = tp_worker_steps(
      "--strategy \"tensor_parallel:tp=2,plan=body.1:colwise|body.3:rowwise\" --devices 2" + flags, "mlp_dropout");
  testing::expect_steps_close(split, spread(one, 2, 2), 5e-6, "tensor_parallel tp=2 with dropout vs one process");
  const auto without = tp_worker_steps("--strategy single_device" + flags);
  EXPECT_NE(without.at(0).at(1), one.at(0).at(1)) << "--model mlp_dropout drew no dropout mask";
}

// Clipping by norm clips by the whole model's norm: each rank's slices and the whole parameters
// (counted once) summed over the tp group, as one process clips; 0.05 clips every step here. With
// the slices' norms alone the two ranks would clip by other factors than one process.
TEST(TensorParallelStrategy, ClipsByTheWholeModelsNorm) {
  const std::string clip = " --batch-size 8 --optimizer momentum --gradient-clip-val 0.05";
  const auto one = tp_worker_steps("--strategy single_device" + clip);
  ASSERT_EQ(one.size(), 1u);
  const auto split = tp_worker_steps("--strategy \"tensor_parallel:tp=2," + kPlan + "\" --devices 2" + clip);
  testing::expect_steps_close(split, spread(one, 2, 2), 5e-6, "tensor_parallel tp=2 clipped to 0.05");
}

// A metric logged with sync_dist and reduce_fx sum (the worker's val_samples: each validation
// batch's size) counts each replica's samples once, not once per rank of its tp group: the
// validation set's size on 2 ranks of one replica and on 4 of two, as on one process.
TEST(TensorParallelStrategy, SummedMetricsCountEachReplicasSamplesOnce) {
  testing::TemporaryDirectory one_dir, two_dir, four_dir;
  const auto one = testing::trained(one_dir.path(), "--model mlp --strategy single_device", 1);
  ASSERT_EQ(one.size(), 1u);
  ASSERT_GT(one[0].val_samples, 0);
  for (const auto& [dir, devices] : {std::pair{&two_dir, 2}, std::pair{&four_dir, 4}}) {
    const auto split = testing::trained(
        dir->path(),
        "--model mlp --strategy \"tensor_parallel:tp=2," + kPlan + "\" --devices " + std::to_string(devices), 1);
    ASSERT_EQ(split.size(), static_cast<size_t>(devices));
    for (const auto& rank : split)
      EXPECT_EQ(rank.val_samples, one[0].val_samples) << devices << " ranks, rank " << rank.rank;
  }
}

// dp=2 x tp=2 on 4 ranks: each replica's tp group equals a ddp rank taking the same share.
TEST(TensorParallelStrategy, ComposesWithDataParallelism) {
  const auto ddp = tp_worker_steps("--strategy ddp --devices 2 --batch-size 4 --optimizer adam");
  ASSERT_EQ(ddp.size(), 2u);
  const auto split =
      tp_worker_steps("--strategy \"tensor_parallel:tp=2," + kPlan + "\" --devices 4 --batch-size 4 --optimizer adam");
  testing::expect_steps_close(split, spread(ddp, 4, 2), 5e-6, "tensor_parallel dp=2 x tp=2 vs ddp on 2 ranks");
}

// data_parallel=fsdp (Note [A model part sharded over its replicas]): dp=2 x tp=2 with each rank's
// slices sharded over its replica pair (fsdp over dp, tensor parallel over tp) trains as ddp on 2
// ranks taking the same shares, within the split's last bits: with Adam, with the Trainer's
// accumulation (the whole gradients held under no_sync), and clipped by the norm of every rank's
// shards (the slices counted on every tp rank, the whole parameters on the first).
TEST(TensorParallelStrategy, ShardsTheSlicesOverTheReplicasWithDataParallelFsdp) {
  const std::string sharded =
      "--strategy \"tensor_parallel:tp=2,data_parallel=fsdp," + kPlan + "\" --devices 4 --batch-size 4 ";
  const auto ddp = [](const std::string& flags) {
    return tp_worker_steps("--strategy ddp --devices 2 --batch-size 4 " + flags);
  };
  for (const std::string flags : {"--optimizer adam", "--accumulate-grad-batches 2 --optimizer adam",
                                  "--gradient-clip-val 0.05 --optimizer momentum"}) {
    const auto reference = ddp(flags);
    ASSERT_EQ(reference.size(), 2u) << flags;
    testing::expect_steps_close(tp_worker_steps(sharded + flags), spread(reference, 4, 2), 5e-6,
                                "tensor_parallel dp=2 (fsdp) x tp=2 vs ddp, " + flags);
  }

  // What rank 0 keeps of the model's parameters between steps, from its live tensors: its slices
  // and the whole parameters, or about half of them sharded (a one-row parameter pads the other
  // replica's chunk).
  const auto parameter_bytes = [](const std::string& data_parallel) {
    return testing::last_logged_by(
        "--model mlp --devices 4 --batch-size 4 --strategy \"tensor_parallel:tp=2,"
        "data_parallel=" +
            data_parallel + "," + kPlan + "\"",
        "tensor_parallel/parameter_bytes");
  };
  testing::expect_sharded_in_two(parameter_bytes("ddp"), parameter_bytes("fsdp"), 0.6);
}

// Its checkpoint is the same whole model and optimizer state: the sharded run resumes it, ddp
// resumes it, and it resumes ddp's, each ending where ddp never interrupted ends, within the split's
// last bits.
TEST(TensorParallelStrategy, AShardedRunsCheckpointResumesAcrossStrategies) {
  const std::string common = " --model mlp --optimizer adam --batch-size 4 --checkpoint-every-epoch";
  testing::expect_checkpoints_resume_across(
      "--strategy \"tensor_parallel:tp=2,data_parallel=fsdp," + kPlan + "\" --devices 4" + common, 4,
      "--strategy ddp --devices 2" + common, 2, 5e-6);
}

// A checkpoint is the whole model with Adam's moments gathered whole: tensor_parallel resumes it bit
// for bit, one process resumes it (and tensor_parallel one process's) within the split's last bits
// (5e-6, as above).
TEST(TensorParallelStrategy, CheckpointsAreWholeAndResumeAcrossStrategies) {
  const std::string common = " --model mlp --optimizer adam --batch-size 8 --checkpoint-every-epoch";
  const std::string split = "--strategy \"tensor_parallel:tp=2," + kPlan + "\" --devices 2" + common;
  const std::string one = "--strategy single_device" + common;
  testing::TemporaryDirectory split_first, one_first;
  testing::trained(split_first.path(), split, 1);
  testing::trained(one_first.path(), one, 1);
  const auto from_split = testing::newest_checkpoint(split_first.path());
  const auto from_one = testing::newest_checkpoint(one_first.path());
  ASSERT_FALSE(from_split.empty() || from_one.empty());
  testing::TemporaryDirectory a, b, c, d;
  const auto uninterrupted = testing::trained(a.path(), split, 2);
  const auto resumed = testing::trained(b.path(), split + " --ckpt-path " + from_split.string(), 2);
  const auto one_from_split = testing::trained(c.path(), one + " --ckpt-path " + from_split.string(), 2);
  const auto split_from_one = testing::trained(d.path(), split + " --ckpt-path " + from_one.string(), 2);
  ASSERT_EQ(uninterrupted.size(), 2u);
  ASSERT_EQ(resumed.size(), 2u);
  ASSERT_EQ(one_from_split.size(), 1u);
  ASSERT_EQ(split_from_one.size(), 2u);
  const auto& want = uninterrupted[0].params;
  for (size_t r = 0; r < 2; ++r) EXPECT_EQ(resumed[r].params, want) << "tensor_parallel from its own, rank " << r;
  const auto expect_close = [&](const std::vector<double>& got, const std::string& what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_NEAR(got[i], want[i], 5e-6 * std::max(1.0, std::abs(want[i]))) << what << ", parameter " << i;
  };
  expect_close(one_from_split[0].params, "single_device from tensor_parallel's checkpoint");
  for (size_t r = 0; r < 2; ++r) expect_close(split_from_one[r].params, "tensor_parallel from single_device's, rank");
}

// A checkpoint written inside an epoch records the samples the tp group's one data replica
// consumed (3 batches of 8: 24, not 8 per rank): one process at the same batch continues at the next
// batch and ends where one process that was never interrupted ends, within the split's last bits
// (5e-6, as above); at batch 4 it continues with the 40 samples not consumed.
TEST(TensorParallelStrategy, AMidEpochCheckpointRecordsTheReplicasSamples) {
  const std::string common = " --model mlp --optimizer momentum";
  const std::string split = "--strategy \"tensor_parallel:tp=2," + kPlan + "\" --devices 2 --batch-size 8" + common;
  const std::string one = "--strategy single_device --batch-size 8" + common;
  testing::TemporaryDirectory dir;
  const auto uninterrupted = testing::trained(dir.path(), one, 2);
  const auto resumed = testing::resumed_mid_epoch(split, 2, one);
  ASSERT_EQ(uninterrupted.size(), 1u);
  ASSERT_EQ(resumed.trained.size(), 1u) << resumed.output;
  const auto& want = uninterrupted[0].params;
  ASSERT_EQ(resumed.trained[0].params.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR(resumed.trained[0].params[i], want[i], 5e-6 * std::max(1.0, std::abs(want[i]))) << "parameter " << i;
  EXPECT_EQ(resumed.output.find("samples in, by"), std::string::npos) << "the same samples per step: no remainder";
  testing::expect_rest_of_the_epoch_after_one_replicas_three_batches(split, common);
}

TEST(TensorParallelStrategyRefusals, SaysWhatToChange) {
  EXPECT_NE(testing::trainer_construction_error("tensor_parallel:tp=3," + kPlan, 4).find("tp=3 does not divide the 4"),
            std::string::npos);
  EXPECT_NE(testing::trainer_construction_error("tensor_parallel", 2).find("the plan is empty"), std::string::npos);
  EXPECT_NE(testing::trainer_construction_error("tensor_parallel:data_parallel=zero," + kPlan, 2).find("fsdp"),
            std::string::npos);
  const auto failing = [](const std::string& flags) {
    testing::TemporaryDirectory dir;
    const auto result = testing::run_command(testing::train_command(dir.path(), flags), 120);
    EXPECT_NE(result.exit_code, 0) << flags;
    return result.output;
  };
  const std::string two = " --devices 2 --batch-size 8 ";
  EXPECT_NE(failing("--strategy \"tensor_parallel:plan=body.9:colwise\" --model mlp" + two)
                .find("plan entry body.9:colwise matches no module"),
            std::string::npos);
  EXPECT_NE(
      failing("--strategy \"tensor_parallel:plan=body.1:colwise\" --model mlp" + two)
          .find("body.1 is a torch::nn::Tanh; the plan splits torch::nn::Linear and torch::nn::Embedding modules only"),
      std::string::npos);
  EXPECT_NE(failing("--strategy \"tensor_parallel:plan=linear:colwise\" --model mlp" + two)
                .find("linear (colwise) has 1 output features, which do not divide among 2 ranks"),
            std::string::npos);
  // A block's linear is called as linear->forward(x) inside the block: never split.
  EXPECT_NE(failing("--strategy \"tensor_parallel:plan=blocks.0.linear:colwise\" --model blocks" + two)
                .find("blocks.0.linear, but the step's forward did not run it split: call it through volt::call"),
            std::string::npos);
}

}  // namespace
}  // namespace volt
