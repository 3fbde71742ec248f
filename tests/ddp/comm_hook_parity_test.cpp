// volt's comm hooks against PyTorch's own (tests/ddp/python/comm_hook_reference.py, run by
// testing::reference_python: PyTorch 1.13 for the build against Debian's LibTorch, 2.11 for the
// build against the wheel's):
// the same MLP (seven Linear layers with biases, Tanh between), initial weights and per-rank
// batches (Python writes them, volt reads them), bucket cap (three buckets after the rebuild,
// two of them holding two 48×48 matrices each), SGD, 2 ranks, 20 steps. PyTorch trains with
// DistributedDataParallel and the hook; volt with its Reducer on two thread ranks and the hook
// exactly as the registry builds it (wrapped in a recorder that only notes each bucket's size).
// Both rebuild their buckets after the first iteration, and the test checks that they build the
// same ones. Every parameter is compared after every step, naming rank, step and parameter.
//
// Tolerances (relative: max |volt − torch| / max |torch| per parameter tensor). Both sides run
// the same LibTorch kernels on one thread, and every case came out bitwise equal (2026-11-24);
// the tolerances leave room for a different summation order, and are tight enough that the
// test fails when the hook is wrong. The issue's own bounds (1e-3 for fp16, 1e-4 for PowerSGD)
// could not tell fp16_compress from a plain all-reduce here (that gives 3.9e-4), so they are
// not what is used:
//   allreduce, noop                        bitwise
//   fp16_compress, fp16 wrapper + allreduce 1e-5  (plain all-reduce instead: 3.9e-4;
//                                                  fp16 wrapper against plain: not bitwise)
//   powersgd, batched_powersgd             1e-5  (start_powersgd_iter=3; several settings; rank 2
//                                                  instead of 1, no warm start or no error
//                                                  feedback, per-tensor instead of batched, or
//                                                  all-reduce: the worst parameter >= 1.5e-3 at
//                                                  the first compressed step)
//   bf16_compress, bf16 wrapper + powersgd 1e-4  (fp16 instead of bf16: 4.3e-3) against a
//                                          hand-made reference: PyTorch 1.13 has no bfloat16
//                                          all_reduce on Gloo, so the script sums bfloat16
//                                          itself around PyTorch's hook code (the closed form
//                                          is in comm_hooks_test.cpp)
// comm_wrapper=fp16 around PowerSGD is not compared: this LibTorch has no float16 matrix product
// on the CPU (volt refuses it, comm_hooks_test.cpp).
//
// What the reference changes in PyTorch's run (see the script's header): DDP's first bucket cap
// is set to volt's min(1 MiB, bucket_cap_mb); the batched hook's _orthogonalize bug (2-D input
// to a 3-D assertion, which fails at the first compressed iteration in 1.13) is patched; and each
// bucket's future is waited before the next bucket's hook runs, because PyTorch's PowerSGD hooks
// start their second and third all_reduce from Gloo's worker threads, whose order differs between
// ranks with several buckets (hangs and "op.preamble.length <= op.nbytes" aborts; counted by
// tools/comm_hook_stress.sh). The reference is retried up to 3 times, each attempt bounded; the
// test fails when it never completes.
#include <gtest/gtest.h>

#include <cstdio>
#include <iomanip>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>

#include "checkpoint/checkpoint_io.h"
#include "core/option_spec.h"
#include "strategies/ddp/comm_hook_registry.h"
#include "strategies/ddp/hooks/compression_wrapper.h"
#include "strategies/ddp/reducer.h"
#include "tests/distributed/thread_ranks.h"
#include "tests/support/test_support.h"

// Its own namespace: the area's tests are compiled together (unity build).
namespace volt::ddp::parity {
namespace {

constexpr int64_t kRanks = 2;
constexpr int64_t kSteps = 20;
const std::vector<int64_t> kWidths{32, 48, 48, 48, 48, 48, 48, 4};
constexpr double kBucketCapMb = 0.015;  // 3,932 floats: three buckets after the rebuild
constexpr double kLearningRate = 0.1;

struct Case {
  std::string name;  // the gtest name
  std::string spec;  // what ddp:comm_hook= takes, plus ",comm_wrapper=fp16|bf16"
  double tolerance;  // relative; 0: bitwise
};

std::ostream& operator<<(std::ostream& out, const Case& c) { return out << c.spec; }

torch::nn::Sequential make_mlp() {
  torch::nn::Sequential mlp;
  for (size_t i = 0; i + 1 < kWidths.size(); ++i) {
    mlp->push_back(torch::nn::Linear(kWidths[i], kWidths[i + 1]));
    if (i + 2 < kWidths.size()) mlp->push_back(torch::nn::Tanh());
  }
  return mlp;
}

std::string widths_text() {
  std::string text;
  for (const auto w : kWidths) text += (text.empty() ? "" : ",") + std::to_string(w);
  return text;
}

// What PyTorch's run left: the data both sides train on and each rank's parameters after every
// step and bucket sizes per iteration.
struct Reference {
  StateDict data;
  std::vector<StateDict> ranks;
};

Reference run_reference(const std::string& spec, const testing::TemporaryDirectory& dir) {
  const std::string script = std::string(VOLT_SOURCE_DIR) + "/tests/ddp/python/comm_hook_reference.py";
  std::ostringstream command;
  command << testing::reference_python() << " " << script << " " << dir.path() << " '" << spec << "' --widths " << widths_text()
          << " --steps " << kSteps << " --bucket-cap-mb " << kBucketCapMb << " --lr " << kLearningRate
          << " --attempts 3 --attempt-timeout 90";
  const auto result = testing::run_command(command.str(), 3 * 90 + 60);
  // Attempts that failed before one succeeded are worth seeing in the log.
  if (result.output.find("attempt 1: ok") == std::string::npos) std::printf("%s\n", result.output.c_str());
  if (result.exit_code != 0) {
    throw std::runtime_error("PyTorch's reference for '" + spec + "' did not complete (exit " +
                             std::to_string(result.exit_code) + "):\n" + result.output);
  }
  Reference reference;
  reference.data = read_checkpoint_file(dir.file("data.pt"), /*require_integrity=*/false);
  for (int64_t r = 0; r < kRanks; ++r) {
    reference.ranks.push_back(read_checkpoint_file(dir.file("rank" + std::to_string(r) + ".pt"), false));
  }
  return reference;
}

// Passes every call to the hook the registry built, noting the size of each bucket it is given.
class RecordingHook : public CommHook {
 public:
  RecordingHook(std::unique_ptr<CommHook> inner, std::map<int64_t, std::vector<int64_t>>& sizes)
      : inner_(std::move(inner)), sizes_(sizes) {}
  std::string name() const override { return inner_->name(); }
  CollectiveHandle run(GradBucket& bucket) override {
    sizes_[bucket.iteration].push_back(bucket.buffer.numel());
    return inner_->run(bucket);
  }
  StateDict state_dict() const override { return inner_->state_dict(); }
  void load_state_dict(const StateDict& state) override { inner_->load_state_dict(state); }
  void on_buckets_rebuilt(const BucketLayout& layout) override { inner_->on_buckets_rebuilt(layout); }

 private:
  std::unique_ptr<CommHook> inner_;
  std::map<int64_t, std::vector<int64_t>>& sizes_;
};

// The hook `spec` names, as `--strategy ddp:comm_hook=<spec>` builds it: from the registry, inside
// a CompressionWrapper when the spec ends in comm_wrapper=fp16|bf16 (DDPStrategy::build_hook).
std::unique_ptr<CommHook> registry_hook(Communicator& communicator, std::string spec) {
  std::optional<torch::Dtype> wrapper;
  for (const auto& [key, dtype] :
       {std::pair{",comm_wrapper=fp16", torch::kHalf}, std::pair{",comm_wrapper=bf16", torch::kBFloat16}}) {
    const auto at = spec.find(key);
    if (at == std::string::npos) continue;
    spec.erase(at, std::string(key).size());
    wrapper = dtype;
  }
  const auto values = comm_hook_registry().parse(spec);
  auto hook = comm_hook_registry().create(parse_named_spec(spec, "test").name, values)->make(communicator);
  if (!wrapper) return hook;
  return std::make_unique<CompressionWrapper>(*wrapper, std::move(hook));
}

struct VoltRun {
  std::vector<std::vector<std::map<std::string, torch::Tensor>>> params;  // [rank][step] name → value
  std::vector<std::map<int64_t, std::vector<int64_t>>> bucket_sizes;     // [rank] iteration → sizes
  std::vector<HookTraffic> traffic;                                       // [rank] the last step's
};

VoltRun run_volt(const std::string& spec, const StateDict& data) {
  torch::set_num_threads(1);  // as the reference: the same kernels, the same summation order
  VoltRun run;
  run.params.resize(kRanks);
  run.bucket_sizes.resize(kRanks);
  run.traffic.resize(kRanks);
  // Modules are built before the threads start (construction draws from the global generator).
  std::vector<torch::nn::Sequential> models;
  for (int64_t r = 0; r < kRanks; ++r) {
    models.push_back(make_mlp());
    torch::NoGradGuard no_grad;
    for (auto& item : models.back()->named_parameters()) item.value().copy_(data.child("init").get_tensor(item.key()));
  }
  const auto errors = testing::run_thread_ranks(kRanks, [&](int64_t rank, int64_t port) {
    auto comm = Communicator::connect(testing::loopback_options(rank, kRanks, port));
    auto& model = models[static_cast<size_t>(rank)];
    std::vector<torch::Tensor> parameters;
    std::vector<std::string> names;
    for (const auto& item : model->named_parameters()) {
      parameters.push_back(item.value());
      names.push_back(item.key());
    }
    ReducerOptions options;
    options.bucket_cap_mb = kBucketCapMb;
    Reducer reducer(parameters, names, *comm, options);
    reducer.set_comm_hook(
        std::make_unique<RecordingHook>(registry_hook(*comm, spec), run.bucket_sizes[static_cast<size_t>(rank)]));
    torch::optim::SGD optimizer(parameters, torch::optim::SGDOptions(kLearningRate));
    for (int64_t step = 0; step < kSteps; ++step) {
      const std::string key = std::to_string(rank) + "." + std::to_string(step);
      for (auto& p : parameters) p.mutable_grad().reset();
      auto loss = torch::mse_loss(model->forward(data.child("x").get_tensor(key)), data.child("y").get_tensor(key));
      reducer.prepare_for_backward(loss);
      loss.backward();
      reducer.finalize_backward();
      optimizer.step();
      auto& after = run.params[static_cast<size_t>(rank)].emplace_back();
      for (size_t i = 0; i < parameters.size(); ++i) after[names[i]] = parameters[i].detach().clone();
    }
    run.traffic[static_cast<size_t>(rank)] = reducer.last_traffic();
  });
  for (size_t r = 0; r < errors.size(); ++r) {
    if (!errors[r].empty()) throw std::runtime_error("volt's rank " + std::to_string(r) + " failed: " + errors[r]);
  }
  return run;
}

double relative_difference(const torch::Tensor& mine, const torch::Tensor& theirs) {
  const double scale = theirs.abs().max().item<double>();
  const double difference = (mine - theirs).abs().max().item<double>();
  return scale > 0 ? difference / scale : difference;
}

class CommHookParity : public ::testing::TestWithParam<Case> {};

TEST_P(CommHookParity, ParametersMatchPyTorchsAfterEveryStep) {
  const Case& c = GetParam();
  testing::TemporaryDirectory dir;
  const Reference reference = run_reference(c.spec, dir);
  const VoltRun volt = run_volt(c.spec, reference.data);

  double worst = 0;
  std::string worst_at = "nowhere";
  for (int64_t rank = 0; rank < kRanks; ++rank) {
    const auto& theirs = reference.ranks[static_cast<size_t>(rank)];
    // The same buckets, in the same order, from the rebuild on (PyTorch 1.13 reduces the first
    // iteration in one bucket; volt already in capped ones — numerically the same there, since
    // every hook compared here reduces that iteration element by element).
    const auto& sizes = volt.bucket_sizes[static_cast<size_t>(rank)];
    ASSERT_EQ(sizes.size(), static_cast<size_t>(kSteps)) << "rank " << rank << ": iterations the hook saw";
    for (int64_t iteration = 1; iteration < kSteps; ++iteration) {
      const auto python_sizes = theirs.child("buckets").get_tensor(std::to_string(iteration)).contiguous();
      const std::vector<int64_t> expected(python_sizes.data_ptr<int64_t>(),
                                          python_sizes.data_ptr<int64_t>() + python_sizes.numel());
      EXPECT_EQ(sizes.at(iteration), expected)
          << "rank " << rank << ", iteration " << iteration << ": bucket sizes, volt vs PyTorch";
    }
    EXPECT_GE(sizes.at(1).size(), 3u) << "several buckets after the rebuild";

    for (int64_t step = 0; step < kSteps; ++step) {
      const auto expected = theirs.child("params").child(std::to_string(step));
      const auto& mine = volt.params[static_cast<size_t>(rank)][static_cast<size_t>(step)];
      ASSERT_EQ(mine.size(), expected.size()) << "rank " << rank << ", step " << step;
      bool failed = false;
      for (const auto& [name, value] : mine) {
        const auto python = expected.get_tensor(name);
        const double difference = relative_difference(value, python);
        const std::string where = "rank " + std::to_string(rank) + ", step " + std::to_string(step) + ", " + name;
        if (difference > worst) {
          worst = difference;
          worst_at = where;
        }
        if (c.tolerance == 0) {
          if (!torch::equal(value, python)) {
            ADD_FAILURE() << c.spec << ": " << where << " differs from PyTorch's (relative " << difference
                          << "; expected bitwise equality)";
            failed = true;
          }
        } else if (difference > c.tolerance) {
          ADD_FAILURE() << c.spec << ": " << where << ": relative difference " << difference << " > "
                        << c.tolerance;
          failed = true;
        }
      }
      if (failed) break;  // later steps of this rank inherit the difference
    }
  }
  // Whatever compresses sends fewer bytes than the buckets hold (what the test compared was
  // compressed, not plain all_reduce).
  if (c.spec.rfind("allreduce", 0) != 0 && c.spec.rfind("noop", 0) != 0) {
    EXPECT_LT(volt.traffic[0].hook_bytes, volt.traffic[0].bucket_bytes) << c.spec;
  }
  std::printf("parity %-95s max relative difference %.3g (%s)\n", c.spec.c_str(), worst, worst_at.c_str());
  RecordProperty("max_relative_difference", std::to_string(worst));
}

const std::vector<Case> kCases{
    {"allreduce", "allreduce", 0},
    {"noop", "noop", 0},
    {"fp16_compress", "fp16_compress", 1e-5},
    {"fp16_wrapper_allreduce", "allreduce,comm_wrapper=fp16", 1e-5},
    {"bf16_compress", "bf16_compress", 1e-4},
    {"powersgd_rank1", "powersgd:matrix_approximation_rank=1,start_powersgd_iter=3", 1e-5},
    {"powersgd_rank2", "powersgd:matrix_approximation_rank=2,start_powersgd_iter=3", 1e-5},
    {"powersgd_rank1_cold", "powersgd:matrix_approximation_rank=1,start_powersgd_iter=3,warm_start=false", 1e-5},
    {"powersgd_rank2_no_error_feedback",
     "powersgd:matrix_approximation_rank=2,start_powersgd_iter=3,use_error_feedback=false", 1e-5},
    {"powersgd_rank1_same_shape",
     "powersgd:matrix_approximation_rank=1,start_powersgd_iter=3,batch_tensors_with_same_shape=true", 1e-5},
    {"powersgd_rank2_same_shape_cold_no_error_feedback",
     "powersgd:matrix_approximation_rank=2,start_powersgd_iter=3,batch_tensors_with_same_shape=true,"
     "warm_start=false,use_error_feedback=false",
     1e-5},
    {"powersgd_rank4_qr", "powersgd:matrix_approximation_rank=4,start_powersgd_iter=3,orthogonalization_epsilon=1e-8",
     1e-5},
    {"batched_powersgd_rank1", "batched_powersgd:matrix_approximation_rank=1,start_powersgd_iter=3", 1e-5},
    {"batched_powersgd_rank2", "batched_powersgd:matrix_approximation_rank=2,start_powersgd_iter=3", 1e-5},
    {"batched_powersgd_rank1_cold", "batched_powersgd:matrix_approximation_rank=1,start_powersgd_iter=3,warm_start=false",
     1e-5},
    {"batched_powersgd_rank2_no_error_feedback",
     "batched_powersgd:matrix_approximation_rank=2,start_powersgd_iter=3,use_error_feedback=false", 1e-5},
    {"bf16_wrapper_powersgd_rank1", "powersgd:matrix_approximation_rank=1,start_powersgd_iter=3,comm_wrapper=bf16", 1e-4},
};

INSTANTIATE_TEST_SUITE_P(Hooks, CommHookParity, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

}  // namespace
}  // namespace volt::ddp::parity
