// Pipeline stages on ranks as threads over Gloo (Note [Running a pipeline stage]): an MLP cut into
// S = 2, 3 and 4 stages balanced by parameter count, each rank running its stage under GPipe and
// 1F1B with M = 1, 2, 3 and 4 micro-batches (and interleaved 1F1B, V chunks a rank, on S·V
// stages), activations and gradients passed by point-to-point
// sends. After every one of three SGD steps each stage's parameters and gradients equal, bit for
// bit, those of the whole model on one process taking the same batch as M-way accumulation (the
// same operations in the same order); the last stage's loss is the mean of the micro-batches';
// a stage held as many micro-batches as the schedule says; pipeline × data parallel on a
// ProcessMesh trains like one process on the global batch; and micro-batches of two shapes are
// refused by the stage that sends them.
#include <gtest/gtest.h>

#include <map>
#include <mutex>

#include "core/error.h"
#include "distributed/process_mesh.h"
#include "strategies/pipeline/pipeline_stage.h"
#include "strategies/pipeline/stage_split.h"
#include "tests/distributed/thread_ranks.h"
#include "tests/pipeline/pipeline_test_model.h"
#include "tests/support/test_support.h"

namespace volt::pipeline {
namespace {

using testing::with_communicators;

using test_model::copy_of;
using test_model::mean_squared_error;
using test_model::mlp;

struct Case {
  int64_t stages;
  int64_t microbatches;
  PipelineSchedule schedule;
  int64_t chunks = 1;  // interleaved_1f1b: each rank runs this many chunks
};

void expect_stages_train_like_one_process(const Case& c) {
  const std::string what = to_string(c.schedule) + ", S " + std::to_string(c.stages) + ", V " +
                           std::to_string(c.chunks) + ", M " + std::to_string(c.microbatches);
  torch::manual_seed(7);
  const auto model = mlp();
  const int64_t batch = 4 * c.microbatches, steps = 3;
  std::vector<torch::Tensor> xs, ys;
  for (int64_t step = 0; step < steps; ++step) {
    xs.push_back(torch::randn({batch, 6}));
    ys.push_back(torch::randn({batch, 1}));
  }
  // One process, M-way accumulation: per step each parameter's gradient, then its value after SGD.
  auto whole = copy_of(model);
  torch::optim::SGD whole_sgd(whole->parameters(), torch::optim::SGDOptions(0.1));
  std::vector<std::map<std::string, std::pair<torch::Tensor, torch::Tensor>>> expected(static_cast<size_t>(steps));
  std::vector<double> expected_loss;
  for (int64_t step = 0; step < steps; ++step) {
    whole_sgd.zero_grad();
    torch::Tensor total;
    const auto x = xs[static_cast<size_t>(step)].chunk(c.microbatches),
               y = ys[static_cast<size_t>(step)].chunk(c.microbatches);
    for (int64_t i = 0; i < c.microbatches; ++i) {
      auto loss = mean_squared_error(whole->forward(x[static_cast<size_t>(i)]), y[static_cast<size_t>(i)]) *
                  (1.0 / static_cast<double>(c.microbatches));
      loss.backward();
      total = total.defined() ? total + loss.detach() : loss.detach();
    }
    expected_loss.push_back(total.item<double>());
    whole_sgd.step();
    for (const auto& p : whole->named_parameters())
      expected[static_cast<size_t>(step)][p.key()] = {p.value().grad().clone(), p.value().detach().clone()};
  }
  const auto starts = balanced_stage_starts(entry_parameter_counts(model), c.stages * c.chunks);
  std::vector<torch::nn::Sequential> copies;
  for (int64_t s = 0; s < c.stages; ++s) copies.push_back(copy_of(model));
  std::mutex report;
  with_communicators(c.stages, [&](Communicator& group) {
    const int64_t s = group.rank();
    // Rank s runs global stages s, s + S, ...; interleaved, its gradients go over a second group.
    std::vector<torch::nn::Sequential> chunks;
    for (int64_t v = 0; v < c.chunks; ++v) chunks.push_back(stage_of(copies[static_cast<size_t>(s)], starts, v * c.stages + s));
    std::vector<int64_t> every;
    for (int64_t r = 0; r < c.stages; ++r) every.push_back(r);
    auto gradients = c.chunks > 1 ? group.new_group(every) : nullptr;
    PipelineStage stage = gradients ? PipelineStage(chunks, group, *gradients) : PipelineStage(chunks[0], group);
    torch::optim::SGD sgd(stage.parameters(), torch::optim::SGDOptions(0.1));
    for (int64_t step = 0; step < steps; ++step) {
      sgd.zero_grad();
      std::vector<torch::Tensor> inputs, targets;
      if (stage.is_first()) inputs = xs[static_cast<size_t>(step)].chunk(c.microbatches);
      if (stage.is_last()) targets = ys[static_cast<size_t>(step)].chunk(c.microbatches);
      const auto loss = stage.run(c.schedule, c.microbatches, inputs, targets, mean_squared_error);
      sgd.step();
      std::lock_guard<std::mutex> lock(report);
      if (stage.is_last()) {
        EXPECT_EQ(loss.item<double>(), expected_loss[static_cast<size_t>(step)]) << what << ", step " << step;
      } else {
        EXPECT_FALSE(loss.defined());
      }
      for (int64_t v = 0; v < c.chunks; ++v) {
        for (const auto& p : stage.chunk(v)->named_parameters()) {
          const auto& [grad, value] = expected[static_cast<size_t>(step)].at(p.key());
          EXPECT_TRUE(torch::equal(p.value().grad(), grad))
              << what << ", stage " << s << ", step " << step << ", " << p.key();
          EXPECT_TRUE(torch::equal(p.value().detach(), value))
              << what << ", stage " << s << ", step " << step << ", " << p.key();
        }
      }
      // GPipe: all M; 1F1B: S - s; interleaved: its warm-up's forwards and one more.
      const int64_t held =
          c.schedule == PipelineSchedule::GPipe      ? c.microbatches
          : c.schedule == PipelineSchedule::OneFOneB ? std::min(c.microbatches, c.stages - s)
                                                     : std::min(c.microbatches * c.chunks,
                                                                2 * (c.stages - s - 1) + (c.chunks - 1) * c.stages + 1);
      EXPECT_EQ(stage.last_step().peak_microbatches_held, held) << what << ", stage " << s;
    }
  });
}

TEST(PipelineStageLikeOneProcess, EveryStepBitwiseUnderGPipeAndOneFOneB) {
  for (const auto schedule : {PipelineSchedule::GPipe, PipelineSchedule::OneFOneB}) {
    for (const int64_t stages : {2, 3, 4}) {
      for (const int64_t microbatches : {1, 2, 3, 4})
        expect_stages_train_like_one_process({stages, microbatches, schedule});
    }
  }
}

// Interleaved 1F1B: the MLP's 7 entries cut into S·V stages, rank s running stages s, s + S, ...;
// the micro-batches pass every rank V times (the last rank handing them back to the first), and
// each chunk's gradients are still the one-process sums, bit for bit.
TEST(PipelineStageLikeOneProcess, EveryStepBitwiseUnderInterleavedOneFOneB) {
  for (const auto& [stages, chunks] : std::vector<std::pair<int64_t, int64_t>>{{2, 2}, {2, 3}, {3, 2}}) {
    for (const int64_t microbatches : {stages, 2 * stages})
      expect_stages_train_like_one_process({stages, microbatches, PipelineSchedule::Interleaved1F1B, chunks});
  }
}

// Pipeline × data parallel on a ProcessMesh pp=2,dp=2 (4 ranks as threads): each replica's two
// stages run half of the global batch as M micro-batches under 1F1B, then every stage averages
// its gradients over its dp group (the ranks holding the same stage). After every step every
// rank's stage equals the whole model on one process taking the global batch as 2M micro-batches,
// within 1e-6 relative (the same mean, summed in another order: per replica, then across).
TEST(PipelineStageLikeOneProcess, TimesDataParallelOnAMesh) {
  torch::manual_seed(5);
  const auto model = mlp();
  const int64_t microbatches = 2, replicas = 2, rows = 4, steps = 3;
  std::vector<torch::Tensor> xs, ys;
  for (int64_t k = 0; k < steps; ++k) {
    xs.push_back(torch::randn({replicas * microbatches * rows, 6}));
    ys.push_back(torch::randn({replicas * microbatches * rows, 1}));
  }
  auto whole = copy_of(model);
  torch::optim::SGD whole_sgd(whole->parameters(), torch::optim::SGDOptions(0.1));
  std::vector<std::map<std::string, torch::Tensor>> expected(static_cast<size_t>(steps));
  for (int64_t k = 0; k < steps; ++k) {
    whole_sgd.zero_grad();
    const auto x = xs[static_cast<size_t>(k)].chunk(replicas * microbatches);
    const auto y = ys[static_cast<size_t>(k)].chunk(replicas * microbatches);
    for (size_t i = 0; i < x.size(); ++i)
      (mean_squared_error(whole->forward(x[i]), y[i]) * (1.0 / static_cast<double>(x.size()))).backward();
    whole_sgd.step();
    for (const auto& p : whole->named_parameters())
      expected[static_cast<size_t>(k)][p.key()] = p.value().detach().clone();
  }
  const auto starts = balanced_stage_starts(entry_parameter_counts(model), 2);
  std::vector<torch::nn::Sequential> copies;
  for (int64_t r = 0; r < 4; ++r) copies.push_back(copy_of(model));
  std::mutex report;
  const auto errors = testing::run_thread_ranks(4, [&](int64_t rank, int64_t port) {
    auto world = Communicator::connect(testing::loopback_options(rank, 4, port));
    auto mesh = ProcessMesh::build(world, parse_mesh_dimensions("dp=2,pp=2"));
    const int64_t s = mesh->coordinate("pp"), replica = mesh->coordinate("dp");
    PipelineStage stage(stage_of(copies[static_cast<size_t>(rank)], starts, s), mesh->group("pp"));
    torch::optim::SGD sgd(stage.module()->parameters(), torch::optim::SGDOptions(0.1));
    for (int64_t k = 0; k < steps; ++k) {
      sgd.zero_grad();
      // This replica's half of the global batch, as M micro-batches.
      const auto x = xs[static_cast<size_t>(k)].chunk(replicas)[static_cast<size_t>(replica)];
      const auto y = ys[static_cast<size_t>(k)].chunk(replicas)[static_cast<size_t>(replica)];
      std::vector<torch::Tensor> inputs, targets;
      if (stage.is_first()) inputs = x.chunk(microbatches);
      if (stage.is_last()) targets = y.chunk(microbatches);
      stage.run(PipelineSchedule::OneFOneB, microbatches, inputs, targets, mean_squared_error);
      for (auto& p : stage.module()->parameters()) mesh->group("dp").all_reduce(p.mutable_grad(), ReduceOp::Mean);
      sgd.step();
      std::lock_guard<std::mutex> lock(report);
      for (const auto& p : stage.module()->named_parameters()) {
        const auto& want = expected[static_cast<size_t>(k)].at(p.key());
        EXPECT_TRUE(torch::allclose(p.value().detach(), want, 1e-6, 1e-6))
            << "rank " << rank << " (" << mesh->describe() << "), step " << k << ", " << p.key() << ": "
            << (p.value().detach() - want).abs().max().item<double>();
      }
    }
  });
  for (size_t r = 0; r < errors.size(); ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

TEST(PipelineStageRefusals, MicrobatchesOfTwoShapesAreRefusedByTheStageThatSendsThem) {
  torch::manual_seed(3);
  const auto model = mlp();
  std::vector<torch::nn::Sequential> copies{copy_of(model), copy_of(model)};
  const auto starts = balanced_stage_starts(entry_parameter_counts(model), 2);
  std::mutex report;
  std::vector<std::string> messages(2);
  const auto errors = testing::run_thread_ranks(2, [&](int64_t rank, int64_t port) {
    // The default timeout: it also bounds the connect, which a loaded machine has needed more than
    // 5 s for. Rank 1 does not wait for it: its receive fails once rank 0 has left.
    auto group = Communicator::connect(testing::loopback_options(rank, 2, port));
    PipelineStage stage(stage_of(copies[static_cast<size_t>(rank)], starts, rank), *group);
    try {
      stage.run(PipelineSchedule::GPipe, 2, {torch::randn({4, 6}), torch::randn({3, 6})},
                {torch::randn({4, 1}), torch::randn({3, 1})}, mean_squared_error);
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lock(report);
      messages[static_cast<size_t>(rank)] = e.what();
    }
  });
  EXPECT_NE(messages[0].find("stage 0's output for micro-batch 1 has shape [3, 16], micro-batch 0's [4, 16]; cut the "
                             "batch into micro-batches of one size"),
            std::string::npos)
      << messages[0];
  EXPECT_FALSE(messages[1].empty()) << "the next stage, left waiting, fails once the first has left";
}

}  // namespace
}  // namespace volt::pipeline
