// PyTorch's torch.distributed.pipelining as the outside oracle of volt's pipeline stages (Note
// [Running a pipeline stage]): the same MLP, initial weights, batches and split, S = 2 and 3 stages
// and M = S and 4 micro-batches, GPipe and 1F1B, SGD; volt's stages on ranks as threads, PyTorch's
// PipelineStage under ScheduleGPipe / Schedule1F1B in S processes over Gloo on the CPU
// (tests/pipeline/python/pytorch_pipelining_reference.py). Every stage's parameters after every
// step agree within 1e-6 relative, the stage and step named on a failure: PyTorch sums the
// micro-batches' gradients and divides by M afterwards (scale_grads), volt divides each
// micro-batch's loss by M before its backward, the same mean rounded elsewhere.
//
// Against PyTorch 2.x only (the PyTorch of this build's LibTorch): 1.13 has no
// torch.distributed.pipelining, so the 1.13 build tree skips this. What runs on the CPU: all of it,
// unpatched (PyTorch's stages exchange shapes and tensors with Gloo's send/recv).
#include <gtest/gtest.h>

#include <fstream>
#include <iomanip>
#include <mutex>
#include <regex>
#include <sstream>

#include "distributed/network.h"
#include "strategies/pipeline/pipeline_stage.h"
#include "strategies/pipeline/stage_split.h"
#include "tests/distributed/thread_ranks.h"
#include "tests/pipeline/pipeline_test_model.h"
#include "tests/support/test_support.h"

namespace volt::pipeline {
namespace {

using test_model::copy_of;
using test_model::mlp;

std::string joined(const torch::Tensor& values) {
  std::ostringstream text;
  text << std::setprecision(17);
  const auto flat = values.reshape({-1}).to(torch::kDouble);
  for (int64_t i = 0; i < flat.numel(); ++i) text << (i ? "," : "") << flat[i].item<double>();
  return text.str();
}

std::vector<double> parsed(const std::string& text) {
  std::vector<double> out;
  std::stringstream items(text);
  std::string item;
  while (std::getline(items, item, ',')) out.push_back(std::stod(item));
  return out;
}

void expect_like_pytorch(int64_t stages, int64_t microbatches, PipelineSchedule schedule) {
  const std::string what =
      to_string(schedule) + ", S " + std::to_string(stages) + ", M " + std::to_string(microbatches);
  torch::manual_seed(11);
  const auto model = mlp();
  const int64_t steps = 3, batch = 4 * microbatches;
  std::vector<torch::Tensor> xs, ys;
  testing::TemporaryDirectory dir;
  const auto data = dir.file("data");
  {
    std::ofstream out(data);
    std::vector<torch::Tensor> flat;
    for (const auto& p : model->parameters()) flat.push_back(p.detach().reshape({-1}));
    out << joined(torch::cat(flat)) << "\n";
    for (int64_t k = 0; k < steps; ++k) {
      xs.push_back(torch::randn({batch, 6}));
      ys.push_back(torch::randn({batch, 1}));
      out << joined(xs.back()) << "\n" << joined(ys.back()) << "\n";
    }
  }
  const auto starts = balanced_stage_starts(entry_parameter_counts(model), stages);
  std::string starts_text;
  for (const auto s : starts) starts_text += (starts_text.empty() ? "" : ",") + std::to_string(s);
  // volt: every stage's parameters after every step.
  std::vector<torch::nn::Sequential> copies;
  for (int64_t s = 0; s < stages; ++s) copies.push_back(copy_of(model));
  std::vector<std::vector<std::vector<double>>> volt(static_cast<size_t>(stages));
  std::mutex lock;
  testing::with_communicators(stages, [&](Communicator& group) {
    const int64_t s = group.rank();
    PipelineStage stage(stage_of(copies[static_cast<size_t>(s)], starts, s), group);
    torch::optim::SGD sgd(stage.module()->parameters(), torch::optim::SGDOptions(0.1));
    for (int64_t k = 0; k < steps; ++k) {
      sgd.zero_grad();
      std::vector<torch::Tensor> inputs, targets;
      if (stage.is_first()) inputs = xs[static_cast<size_t>(k)].chunk(microbatches);
      if (stage.is_last()) targets = ys[static_cast<size_t>(k)].chunk(microbatches);
      stage.run(schedule, microbatches, inputs, targets, test_model::mean_squared_error);
      sgd.step();
      std::vector<torch::Tensor> flat;
      for (const auto& p : stage.module()->parameters()) flat.push_back(p.detach().reshape({-1}));
      std::lock_guard<std::mutex> guard(lock);
      volt[static_cast<size_t>(s)].push_back(parsed(joined(torch::cat(flat))));
    }
  });
  const auto result = testing::run_command(
      testing::reference_python() + " " + VOLT_SOURCE_DIR + "/tests/pipeline/python/pytorch_pipelining_reference.py" +
          " --stages " + std::to_string(stages) + " --starts " + starts_text + " --microbatches " +
          std::to_string(microbatches) + " --schedule " + to_string(schedule) + " --data " + data + " --port " +
          std::to_string(find_free_port()) + " 2>&1",
      300);
  ASSERT_EQ(result.exit_code, 0) << what << ": the PyTorch reference failed:\n" << result.output;
  const std::regex line("STEP stage=(\\d+) step=(\\d+) params=(\\S+)");
  int64_t compared = 0;
  for (std::sregex_iterator it(result.output.begin(), result.output.end(), line), end; it != end; ++it) {
    const auto s = static_cast<size_t>(std::stoll((*it)[1])), k = static_cast<size_t>(std::stoll((*it)[2]));
    const auto expected = parsed((*it)[3]);
    ASSERT_LT(s, volt.size());
    ASSERT_LT(k, volt[s].size());
    const auto& have = volt[s][k];
    ASSERT_EQ(have.size(), expected.size()) << what << ", stage " << s << ", step " << k;
    for (size_t i = 0; i < have.size(); ++i) {
      ASSERT_LE(std::abs(have[i] - expected[i]), 1e-6 * std::max(1.0, std::abs(expected[i])))
          << what << ": stage " << s << ", step " << k << ", parameter " << i << ": volt " << have[i] << ", PyTorch "
          << expected[i];
    }
    ++compared;
  }
  EXPECT_EQ(compared, stages * steps) << what << ": PyTorch printed\n" << result.output;
}

TEST(PipelineStagesEqualPyTorchPipelining, GPipeAndOneFOneBAfterEveryStep) {
  if (testing::reference_torch_version().rfind("2.", 0) != 0) {
    GTEST_SKIP() << "torch.distributed.pipelining is PyTorch 2.x's; this build's reference PyTorch is "
                 << testing::reference_torch_version()
                 << " (the build against PyTorch 2.11's LibTorch, tools/setup_pytorch2.sh, runs this)";
  }
  for (const auto schedule : {PipelineSchedule::GPipe, PipelineSchedule::OneFOneB}) {
    // PyTorch's 1F1B refuses fewer micro-batches than stages (volt's runs them: pipeline_stage_test).
    for (const int64_t stages : {2, 3}) {
      for (const int64_t microbatches : {stages, int64_t{4}}) expect_like_pytorch(stages, microbatches, schedule);
    }
  }
}

}  // namespace
}  // namespace volt::pipeline
