// `--strategy pipeline` through the Trainer (Note [The pipeline strategy]): the distributed worker's
// 5-entry MLP (--model mlp) cut into stages on processes started by volt's launcher, against one
// process taking the same micro-batches with accumulation and against ddp, after every step on
// every rank; its checkpoints resumed across strategies; its refusals; a rank killed mid-step.
#include <gtest/gtest.h>

#include <chrono>
#include <regex>

#include "precision/mixed_precision.h"
#include "strategies/pipeline/pipeline_strategy.h"
#include "tests/distributed/worker_runs.h"
#include "tests/support/regression_problem.h"

namespace volt {
namespace {

using testing::StepParameters;

// The worker's MLP for 2 epochs of 64 samples with --print-steps, no validation.
StepParameters pipeline_worker_steps(const std::string& flags) {
  testing::TemporaryDirectory dir;
  const auto result = testing::run_command(
      testing::train_command(dir.path(), "--model mlp --print-steps --limit-val-batches 0 " + flags), 240);
  EXPECT_EQ(result.exit_code, 0) << flags << ":\n" << result.output;
  return testing::step_lines(result.output);
}

// `reference`'s rank 0 as every one of `ranks` ranks: what each rank of the pipeline must print.
StepParameters as_every_rank(const StepParameters& reference, int64_t ranks) {
  StepParameters every;
  if (reference.empty()) return every;
  for (int64_t r = 0; r < ranks; ++r) every[r] = reference.begin()->second;
  return every;
}

struct Case {
  int64_t stages, microbatches;
  std::string schedule;
};

// One pipeline (no data parallelism) on a batch of 8 equals one process on batches of 8 / M with
// M-way accumulation bit for bit: each stage runs its micro-batches' backwards in order with the
// loss divided by M, as the accumulation does, and the Trainer's window of 1 multiplies by 1.
TEST(PipelineStrategy, TrainsBitwiseLikeOneProcessAccumulatingTheMicroBatches) {
  const std::vector<Case> cases = {{2, 1, "1f1b"},  {2, 2, "1f1b"}, {2, 4, "gpipe"}, {2, 8, "1f1b"},
                                   {3, 2, "gpipe"}, {3, 4, "1f1b"}, {4, 4, "gpipe"}, {4, 2, "1f1b"}};
  for (const std::string optimizer : {"sgd", "adam"}) {
    for (const auto& c : cases) {
      if (optimizer == "adam" && c.stages != 3) continue;
      const auto what =
          "S=" + std::to_string(c.stages) + " M=" + std::to_string(c.microbatches) + " " + c.schedule + " " + optimizer;
      const auto reference = pipeline_worker_steps("--strategy single_device --optimizer " + optimizer +
                                                   " --batch-size " + std::to_string(8 / c.microbatches) +
                                                   " --accumulate-grad-batches " + std::to_string(c.microbatches));
      ASSERT_EQ(reference.size(), 1u) << what;
      ASSERT_EQ(reference.begin()->second.size(), 16u) << what;  // 8 steps an epoch
      const auto got = pipeline_worker_steps("--strategy pipeline:stages=" + std::to_string(c.stages) +
                                             ",microbatches=" + std::to_string(c.microbatches) +
                                             ",schedule=" + c.schedule + " --devices " + std::to_string(c.stages) +
                                             " --optimizer " + optimizer + " --batch-size 8");
      testing::expect_steps_close(got, as_every_rank(reference, c.stages), 0.0, what);
    }
  }
}

// Interleaved 1F1B (2 ranks holding 2 chunks each: the MLP's 5 entries cut into 4 stages, the
// micro-batches passing both ranks twice) is bitwise the same accumulation; and 2 replicas of it
// (4 ranks) equal ddp on 2 ranks.
TEST(PipelineStrategy, InterleavedTrainsBitwiseLikeOneProcess) {
  for (const auto& [microbatches, optimizer] : std::vector<std::pair<int64_t, std::string>>{{2, "sgd"}, {4, "adam"}}) {
    const auto what = "interleaved_1f1b S=2 V=2 M=" + std::to_string(microbatches) + " " + optimizer;
    const auto reference = pipeline_worker_steps("--strategy single_device --optimizer " + optimizer +
                                                 " --batch-size " + std::to_string(8 / microbatches) +
                                                 " --accumulate-grad-batches " + std::to_string(microbatches));
    ASSERT_EQ(reference.size(), 1u) << what;
    const auto got = pipeline_worker_steps("--strategy pipeline:stages=2,virtual_stages=2,schedule=interleaved_1f1b,"
                                           "microbatches=" +
                                           std::to_string(microbatches) + " --devices 2 --optimizer " + optimizer +
                                           " --batch-size 8");
    testing::expect_steps_close(got, as_every_rank(reference, 2), 0.0, what);
  }
  const auto ddp =
      pipeline_worker_steps("--strategy ddp --devices 2 --batch-size 4 --accumulate-grad-batches 2 --optimizer adam");
  const auto replicated = pipeline_worker_steps(
      "--strategy pipeline:stages=2,virtual_stages=2,schedule=interleaved_1f1b,microbatches=2 --devices 4 "
      "--batch-size 8 --optimizer adam");
  testing::expect_steps_close(replicated, as_every_rank(ddp, 4), 1e-6, "interleaved pipeline x dp (2 x 2) vs ddp");
}

// Two replicas of a 2-stage pipeline (dp=2,pp=2 on 4 ranks) equal ddp on 2 ranks taking the same
// shares of the data with the same accumulation; the Trainer's accumulation over pipeline steps
// equals one process's within the last bits (each step's micro-batches are summed, scaled by
// 1/window and added to the window's sum so far: another order of the same additions).
TEST(PipelineStrategy, ComposesWithDataParallelismAndTheTrainersAccumulation) {
  for (const std::string schedule : {"1f1b", "gpipe"}) {
    const auto ddp =
        pipeline_worker_steps("--strategy ddp --devices 2 --batch-size 4 --accumulate-grad-batches 2 --optimizer adam");
    ASSERT_EQ(ddp.size(), 2u);
    const auto pipelined = pipeline_worker_steps("--strategy pipeline:stages=2,microbatches=2,schedule=" + schedule +
                                                 " --devices 4 --batch-size 8 --optimizer adam");
    testing::expect_steps_close(pipelined, as_every_rank(ddp, 4), 1e-6, "pipeline x dp (2 x 2) vs ddp, " + schedule);
  }
  const auto one =
      pipeline_worker_steps("--strategy single_device --batch-size 4 --accumulate-grad-batches 4 --optimizer adam");
  const auto accumulated = pipeline_worker_steps(
      "--strategy pipeline:stages=2,microbatches=2 --devices 2 --batch-size 8 --accumulate-grad-batches 2 "
      "--optimizer adam");
  ASSERT_EQ(one.size(), 1u);
  ASSERT_EQ(one.begin()->second.size(), 8u);
  testing::expect_steps_close(accumulated, as_every_rank(one, 2), 1e-6, "pipeline with accumulate_grad_batches=2");
}

// Clipping by norm clips by the whole model's norm, each stage's part summed over the pipeline.
TEST(PipelineStrategy, ClipsByTheGlobalNormAcrossStages) {
  const std::string clip = " --gradient-clip-val 0.05 --optimizer momentum";
  const auto reference =
      pipeline_worker_steps("--strategy single_device --batch-size 4 --accumulate-grad-batches 2" + clip);
  const auto got =
      pipeline_worker_steps("--strategy pipeline:stages=3,microbatches=2 --devices 3 --batch-size 8" + clip);
  testing::expect_steps_close(got, as_every_rank(reference, 3), 1e-6, "clipped to 0.05");
}

// data_parallel=fsdp (Note [A model part sharded over its replicas]): two replicas of a 2-stage pipeline,
// each stage sharded over its pair of ranks (4 ranks), train as ddp on 2 ranks taking the same
// shares, within the last bits (the reduce-scatter adds in another order than ddp's all-reduce),
// after every step on every rank: with Adam under both schedules, with the Trainer's accumulation
// (the whole gradients held under no_sync), and clipped by the norm of every rank's shards.
TEST(PipelineStrategy, ShardsEachStageOverItsReplicasWithDataParallelFsdp) {
  const std::string sharded =
      "--devices 4 --batch-size 8 --strategy pipeline:stages=2,microbatches=2,data_parallel=fsdp";
  const auto ddp = [](const std::string& flags) {
    return pipeline_worker_steps("--strategy ddp --devices 2 --batch-size 4 " + flags);
  };
  const auto adam = ddp("--accumulate-grad-batches 2 --optimizer adam");
  ASSERT_EQ(adam.size(), 2u);
  for (const std::string schedule : {"1f1b", "gpipe"}) {
    testing::expect_steps_close(pipeline_worker_steps(sharded + ",schedule=" + schedule + " --optimizer adam"),
                                as_every_rank(adam, 4), 1e-6, "fsdp over dp, " + schedule);
  }
  testing::expect_steps_close(pipeline_worker_steps(sharded + " --accumulate-grad-batches 2 --optimizer adam"),
                              as_every_rank(ddp("--accumulate-grad-batches 4 --optimizer adam"), 4), 1e-6,
                              "fsdp over dp, accumulating 2");
  const std::string clip = " --gradient-clip-val 0.05 --optimizer momentum";
  testing::expect_steps_close(pipeline_worker_steps(sharded + clip),
                              as_every_rank(ddp("--accumulate-grad-batches 2" + clip), 4), 1e-6,
                              "fsdp over dp, clipped to 0.05");

  // What rank 0 keeps of its stage between steps, from its live tensors: about half (each
  // parameter's rows split in two; a one-row parameter pads the other rank's chunk).
  const auto stage_bytes = [](const std::string& data_parallel) {
    return testing::last_logged_by(
        "--model mlp --limit-val-batches 0 --devices 4 --batch-size 8 --strategy "
        "pipeline:stages=2,microbatches=2,data_parallel=" +
            data_parallel,
        "pipeline/stage_parameter_bytes");
  };
  testing::expect_sharded_in_two(stage_bytes("ddp"), stage_bytes("fsdp"), 0.55);
}

// The checkpoint of a sharded pipeline is the full layout too: it resumes under the sharded
// pipeline and under ddp, and ddp's resumes under it, each ending where ddp never interrupted ends.
TEST(PipelineStrategy, AShardedPipelinesCheckpointResumesAcrossStrategies) {
  const std::string common = " --model mlp --optimizer adam --limit-val-batches 0 --checkpoint-every-epoch";
  testing::expect_checkpoints_resume_across(
      "--strategy pipeline:stages=2,microbatches=2,data_parallel=fsdp --devices 4 --batch-size 8" + common, 4,
      "--strategy ddp --devices 2 --batch-size 4 --accumulate-grad-batches 2" + common, 2, 1e-6);
}

// A pipeline's checkpoint is the whole model under its names with the optimizer's state in
// PyTorch's layout: the pipeline resumes it bit for bit, and so does one process (whose training
// equals the pipeline's, above); one process's checkpoint resumes under the pipeline the same.
TEST(PipelineStrategy, CheckpointsResumeAcrossPipelineAndOneProcess) {
  const std::string common = " --model mlp --optimizer adam --limit-val-batches 0 --checkpoint-every-epoch";
  const std::string pipelined = "--strategy pipeline:stages=2,microbatches=2 --devices 2 --batch-size 8" + common;
  const std::string one = "--strategy single_device --batch-size 4 --accumulate-grad-batches 2" + common;
  testing::TemporaryDirectory pipeline_first, one_first;
  testing::trained(pipeline_first.path(), pipelined, 1);
  testing::trained(one_first.path(), one, 1);
  const auto from_pipeline = testing::newest_checkpoint(pipeline_first.path());
  const auto from_one = testing::newest_checkpoint(one_first.path());
  ASSERT_FALSE(from_pipeline.empty() || from_one.empty());

  testing::TemporaryDirectory a, b, c, d;
  const auto uninterrupted = testing::trained(a.path(), one, 2);
  ASSERT_EQ(uninterrupted.size(), 1u);
  const auto& want = uninterrupted[0].params;
  const auto pipeline_resumed = testing::trained(b.path(), pipelined + " --ckpt-path " + from_pipeline.string(), 2);
  const auto one_from_pipeline = testing::trained(c.path(), one + " --ckpt-path " + from_pipeline.string(), 2);
  const auto pipeline_from_one = testing::trained(d.path(), pipelined + " --ckpt-path " + from_one.string(), 2);
  ASSERT_EQ(pipeline_resumed.size(), 2u);
  ASSERT_EQ(one_from_pipeline.size(), 1u);
  ASSERT_EQ(pipeline_from_one.size(), 2u);
  for (size_t r = 0; r < 2; ++r) {
    EXPECT_EQ(pipeline_resumed[r].params, want) << "pipeline from its own checkpoint, rank " << r;
    EXPECT_EQ(pipeline_from_one[r].params, want) << "pipeline from single_device's checkpoint, rank " << r;
  }
  EXPECT_EQ(one_from_pipeline[0].params, want) << "single_device from the pipeline's checkpoint";
}

// Under interleaved 1F1B each rank holds two chunks, not one contiguous stage: its checkpoint is
// still the whole model under its names, which one process resumes bit for bit, and it resumes one
// process's.
TEST(PipelineStrategy, AnInterleavedPipelinesCheckpointResumesOnOneProcessAndBack) {
  const std::string common = " --model mlp --optimizer adam --limit-val-batches 0 --checkpoint-every-epoch";
  const std::string interleaved =
      "--strategy pipeline:stages=2,virtual_stages=2,schedule=interleaved_1f1b,microbatches=2 --devices 2 "
      "--batch-size 8" +
      common;
  const std::string one = "--strategy single_device --batch-size 4 --accumulate-grad-batches 2" + common;
  testing::TemporaryDirectory interleaved_first, one_first;
  testing::trained(interleaved_first.path(), interleaved, 1);
  testing::trained(one_first.path(), one, 1);
  const auto from_interleaved = testing::newest_checkpoint(interleaved_first.path());
  const auto from_one = testing::newest_checkpoint(one_first.path());
  ASSERT_FALSE(from_interleaved.empty() || from_one.empty());
  testing::TemporaryDirectory a, b, c;
  const auto uninterrupted = testing::trained(a.path(), one, 2);
  ASSERT_EQ(uninterrupted.size(), 1u);
  const auto one_from_interleaved = testing::trained(b.path(), one + " --ckpt-path " + from_interleaved.string(), 2);
  const auto interleaved_from_one = testing::trained(c.path(), interleaved + " --ckpt-path " + from_one.string(), 2);
  ASSERT_EQ(one_from_interleaved.size(), 1u);
  ASSERT_EQ(interleaved_from_one.size(), 2u);
  EXPECT_EQ(one_from_interleaved[0].params, uninterrupted[0].params) << "single_device from the interleaved checkpoint";
  for (size_t r = 0; r < 2; ++r) {
    EXPECT_EQ(interleaved_from_one[r].params, uninterrupted[0].params)
        << "interleaved from single_device's checkpoint, rank " << r;
  }
}

// A checkpoint written inside an epoch records the samples the pipeline's one data replica
// consumed (3 batches of 8: 24, not 8 per stage): one process at the same batch continues at the
// next batch and ends bit for bit where one process that was never interrupted ends; at batch 4 it
// continues with the 40 samples not consumed.
TEST(PipelineStrategy, AMidEpochCheckpointRecordsTheReplicasSamples) {
  const std::string common = " --model mlp --optimizer adam --limit-val-batches 0";
  const std::string pipelined = "--strategy pipeline:stages=2,microbatches=1 --devices 2 --batch-size 8" + common;
  const std::string one = "--strategy single_device --batch-size 8" + common;
  testing::TemporaryDirectory dir;
  const auto uninterrupted = testing::trained(dir.path(), one, 2);
  const auto resumed = testing::resumed_mid_epoch(pipelined, 2, one);
  ASSERT_EQ(uninterrupted.size(), 1u);
  ASSERT_EQ(resumed.trained.size(), 1u) << resumed.output;
  EXPECT_EQ(resumed.trained[0].params, uninterrupted[0].params);
  EXPECT_EQ(resumed.output.find("samples in, by"), std::string::npos) << "the same samples per step: no remainder";
  testing::expect_rest_of_the_epoch_after_one_replicas_three_batches(pipelined, common);
}

// Rank 0 (the first stage) logs the last stage's loss, broadcast to it, and its own idle share.
TEST(PipelineStrategy, RankZeroLogsTheLastStagesLoss) {
  testing::TemporaryDirectory dir;
  const auto result = testing::run_command(
      testing::train_command(dir.path(),
                             "--model mlp --limit-val-batches 0 --strategy pipeline:stages=2,microbatches=2 "
                             "--devices 2 --batch-size 8"),
      240);
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const double loss = testing::last_logged(dir.path(), "pipeline/loss");
  const double idle = testing::last_logged(dir.path(), "pipeline/idle_fraction");
  EXPECT_GT(loss, 0.0) << result.output;
  EXPECT_LT(loss, 100.0) << result.output;
  EXPECT_GE(idle, 0.0);
  EXPECT_LE(idle, 1.0);
}

TEST(PipelineStrategyRefusals, SaysWhatToChange) {
  EXPECT_NE(
      testing::trainer_construction_error("pipeline:stages=3", 4).find("stages=3 does not divide the 4 processes"),
      std::string::npos);
  // 16-mixed itself needs CUDA; a precision that scales losses stands in for it on the CPU.
  struct LossScaling : Precision {
    std::string name() const override { return "16-mixed"; }
    bool scales_losses() const override { return true; }
  };
  EXPECT_NE(testing::configuration_error_of([] {
              PipelineStrategy().set_precision(std::make_shared<LossScaling>());
            }).find("--precision 16-mixed scales the loss"),
            std::string::npos);
  EXPECT_FALSE(MixedPrecision(torch::kBFloat16, torch::kCPU).scales_losses()) << "bf16-mixed has no scaler";
  EXPECT_NE(testing::trainer_construction_error("pipeline:microbatches=0", 2).find("microbatches"), std::string::npos);
  EXPECT_NE(testing::trainer_construction_error("pipeline:schedule=zigzag", 2).find("1f1b"), std::string::npos);
  EXPECT_NE(testing::trainer_construction_error("pipeline:data_parallel=zero", 2).find("fsdp"), std::string::npos);
  EXPECT_NE(testing::trainer_construction_error("pipeline:virtual_stages=0", 2).find("virtual_stages"),
            std::string::npos);

  const auto failing = [](const std::string& flags) {
    testing::TemporaryDirectory dir;
    const auto result = testing::run_command(testing::train_command(dir.path(), flags), 120);
    EXPECT_NE(result.exit_code, 0) << flags;
    return result.output;
  };
  const std::string two = "--strategy pipeline:stages=2,microbatches=3 --devices 2 --limit-val-batches 0 ";
  EXPECT_NE(
      failing(two + "--model mlp --batch-size 8").find("a batch of 8 samples does not divide into microbatches=3"),
      std::string::npos);
  EXPECT_NE(failing(two + "--model linear --batch-size 6").find("runs as a pipeline's layers only with hidden > 0"),
            std::string::npos);
  // Interleaving needs M a multiple of S, 2 or more chunks, and S·V stages the model can be cut into.
  const std::string interleaved = "--model mlp --batch-size 6 --devices 2 --limit-val-batches 0 --strategy ";
  EXPECT_NE(failing(interleaved + "pipeline:stages=2,microbatches=3,schedule=interleaved_1f1b,virtual_stages=2")
                .find("microbatches=3 is no multiple of stages=2"),
            std::string::npos);
  EXPECT_NE(failing(interleaved + "pipeline:stages=2,microbatches=2,schedule=interleaved_1f1b")
                .find("give each rank at least 2 chunks (virtual_stages=2)"),
            std::string::npos);
  EXPECT_NE(failing(interleaved + "pipeline:stages=2,microbatches=2,virtual_stages=2")
                .find("virtual_stages=2 with schedule=1f1b"),
            std::string::npos);
  EXPECT_NE(failing(interleaved + "pipeline:stages=2,microbatches=2,schedule=interleaved_1f1b,virtual_stages=3")
                .find("6 stages"),
            std::string::npos);
  EXPECT_NE(failing("--strategy pipeline:microbatches=2 --devices 2 --model mlp --batch-size 8")
                .find("runs training steps only, and the Trainer asked for a step to validate"),
            std::string::npos);
}

// A model whose pipeline_shared_parameters() names what `shared` gives.
class SharedReads : public testing::RegressionModule {
 public:
  using Reads = std::function<std::vector<pipeline::SharedParameter>(SharedReads&)>;
  explicit SharedReads(Reads reads) : RegressionModule({.hidden = 4}), reads_(std::move(reads)) {}
  std::vector<pipeline::SharedParameter> pipeline_shared_parameters() override { return reads_(*this); }

 private:
  Reads reads_;
};

TEST(PipelineStrategyRefusals, ASharedParameterIsALayersReadByAnExistingLayer) {
  const auto fit_error = [](const SharedReads::Reads& reads) {
    return testing::configuration_error_of([&] {
      testing::TemporaryDirectory dir;
      auto options = testing::quiet_options(dir.path());
      options.strategy = "pipeline";
      options.max_steps = 1;
      Trainer trainer(options);
      trainer.fit(std::make_shared<SharedReads>(reads), std::make_shared<testing::RegressionData>(16, 4));
    });
  };
  const auto layer_99 = fit_error([](SharedReads& m) {
    return std::vector<pipeline::SharedParameter>{{.layer = 99, .parameter = m.linear->weight}};
  });
  EXPECT_NE(layer_99.find("pipeline_shared_parameters() names layer 99 of the 5 pipeline_layers()"), std::string::npos)
      << layer_99;
  const auto stray = torch::zeros({2});
  const auto unregistered =
      fit_error([&](SharedReads&) { return std::vector<pipeline::SharedParameter>{{.layer = 0, .parameter = stray}}; });
  EXPECT_NE(unregistered.find("is registered in none of pipeline_layers(); register it in the layer that owns it"),
            std::string::npos)
      << unregistered;
}

// A stage killed in the middle of a step (its neighbours waiting on its sends) ends the run in
// seconds, naming it, on every rank the launcher started.
TEST(PipelineStrategyFailure, AKilledStageEndsTheRunNamingIt) {
  testing::TemporaryDirectory dir;
  const auto start = std::chrono::steady_clock::now();
  const auto result =
      testing::run_command(testing::train_command(dir.path(),
                                                  "--strategy pipeline:stages=3 --devices 3 --model mlp --batch-size 8 "
                                                  "--limit-val-batches 0 --kill-rank 1 --kill-batch 2 2>&1"),
                           120);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(result.exit_code, 0) << result.output;
  EXPECT_LT(seconds, 30.0) << "well within the 60 s timeout: " << result.output;
  EXPECT_NE(result.output.find("KILLING rank=1"), std::string::npos) << result.output;
  EXPECT_TRUE(
      std::regex_search(result.output, std::regex("rank 1 \\(local rank 1, pid \\d+\\) was killed by signal 9")))
      << result.output;
  EXPECT_NE(result.output.find("[rank 0] error: the first failure was rank 1"), std::string::npos) << result.output;
}

}  // namespace
}  // namespace volt
