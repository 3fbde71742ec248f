// The built-in comm hooks on 2 ranks as threads, against closed forms: fp16/bf16 compression is
// the low-precision mean computed by hand (and sends exactly half the bytes); PowerSGD all-reduces
// plainly before start_powersgd_iter, counts only synchronizing iterations, sends what its formula
// says, reproduces the mean at full rank (P spans the gradients' column space), and resumes
// bitwise from its checkpoint state; bad combinations fail with clear errors. Parity with
// PyTorch's own hooks is tests/ddp/comm_hook_parity_test.cpp.
#include <gtest/gtest.h>

#include "precision/precision.h"
#include "strategies/ddp/comm_hook_registry.h"
#include "strategies/ddp/ddp_strategy.h"
#include "strategies/ddp/hooks/compression_wrapper.h"
#include "strategies/ddp/hooks/numpy_random_state.h"
#include "strategies/ddp/hooks/powersgd_hook.h"
#include "strategies/ddp/reducer.h"
#include "tests/ddp/reducer_harness.h"
#include "tests/distributed/thread_ranks.h"
#include "tests/support/regression_problem.h"
#include "tests/support/test_support.h"

namespace volt::ddp {
namespace {

using harness::flat_grads;
using harness::make_net;
using harness::names_of;
using harness::Net;
using testing::loopback_options;
using testing::run_thread_ranks;

constexpr int64_t kRanks = 2;

torch::Tensor input_of(int64_t rank, int64_t step, int64_t micro = 0) {
  return torch::randn({6, 8}, at::detail::createCPUGenerator(static_cast<uint64_t>(1000 + 100 * step + 10 * micro + rank)));
}

torch::Tensor loss_of(Net& net, int64_t rank, int64_t step, int64_t micro = 0) {
  return net.forward(input_of(rank, step, micro), false).pow(2).mean();
}

// Each rank's own gradient of step 0 (no reducer): what the hooks average.
std::vector<torch::Tensor> local_gradients() {
  std::vector<torch::Tensor> grads;
  for (int64_t rank = 0; rank < kRanks; ++rank) {
    auto net = make_net();
    loss_of(*net, rank, 0).backward();
    grads.push_back(flat_grads(*net));
  }
  return grads;
}

struct RankResult {
  std::vector<torch::Tensor> grads;  // after each step
  HookTraffic traffic;
  StateDict state;                   // the reducer's, after the last step
};

using Nets = std::vector<std::shared_ptr<Net>>;

// The same initial weights on every rank (built before the threads start: the init draws from the
// global generator).
Nets fresh_nets() {
  Nets nets;
  for (int64_t r = 0; r < kRanks; ++r) nets.push_back(make_net());
  return nets;
}

// `steps` optimizer steps (SGD, lr 0.1) of `micro` micro-batches (all but the last in no_sync)
// with the hook `make` builds, on `nets` (fresh ones when empty), from step `first_step`, with a
// new Reducer that loads `resume_from` (per rank) when given.
std::vector<RankResult> train(const std::function<std::unique_ptr<CommHook>(Communicator&)>& make, int64_t steps,
                              int64_t micro = 1, const std::vector<StateDict>& resume_from = {},
                              int64_t first_step = 0, double bucket_mb = 25.0, Nets nets = {},
                              ReducerOptions reducer_options = {}) {
  if (nets.empty()) nets = fresh_nets();
  reducer_options.bucket_cap_mb = bucket_mb;
  std::vector<RankResult> results(kRanks);
  const auto errors = run_thread_ranks(kRanks, [&](int64_t rank, int64_t port) {
    auto comm = Communicator::connect(loopback_options(rank, kRanks, port));
    Net& net = *nets[static_cast<size_t>(rank)];
    Reducer reducer(net.parameters(), names_of(net), *comm, reducer_options);
    reducer.set_comm_hook(make(*comm));
    if (!resume_from.empty()) reducer.load_state_dict(resume_from[static_cast<size_t>(rank)]);
    auto& result = results[static_cast<size_t>(rank)];
    for (int64_t s = first_step; s < first_step + steps; ++s) {
      for (int64_t m = 0; m < micro; ++m) {
        reducer.set_require_sync(m + 1 == micro);
        auto loss = loss_of(net, rank, s, m);
        reducer.prepare_for_backward(loss);
        loss.backward();
        reducer.finalize_backward();
      }
      result.grads.push_back(flat_grads(net).clone());
      torch::NoGradGuard no_grad;
      for (auto& p : net.parameters()) {
        p.sub_(0.1 * p.grad());
        p.mutable_grad().reset();
      }
    }
    result.traffic = reducer.last_traffic();
    result.state = reducer.state_dict();
  });
  for (size_t r = 0; r < errors.size(); ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
  return results;
}

std::unique_ptr<CommHook> hook(Communicator& c, const std::string& spec) {
  const auto values = comm_hook_registry().parse(spec);
  return comm_hook_registry().create(parse_named_spec(spec, "test").name, values)->make(c);
}

void expect_compressed_mean(const std::string& hook_name, torch::Dtype dtype) {
  const auto local = local_gradients();
  const auto results = train([&](Communicator& c) { return hook(c, hook_name); }, 1);
  // PyTorch's op order: cast, divide by the world size in the low precision, sum, decompress.
  const auto expected = (local[0].to(dtype).div(2.0) + local[1].to(dtype).div(2.0)).to(torch::kFloat);
  for (int64_t r = 0; r < kRanks; ++r) {
    EXPECT_TRUE(torch::equal(results[static_cast<size_t>(r)].grads[0], expected))
        << hook_name << ", rank " << r << ": max difference "
        << (results[static_cast<size_t>(r)].grads[0] - expected).abs().max().item<double>();
    const auto& traffic = results[static_cast<size_t>(r)].traffic;
    EXPECT_EQ(traffic.hook_bytes * 2, traffic.bucket_bytes) << hook_name << ": 2 bytes per float32 gradient";
  }
}

TEST(CommHooks, Fp16CompressIsTheHalfPrecisionMeanAtHalfTheBytes) { expect_compressed_mean("fp16_compress", torch::kHalf); }

TEST(CommHooks, Bf16CompressIsTheBfloat16MeanAtHalfTheBytes) {
  expect_compressed_mean("bf16_compress", torch::kBFloat16);
}

TEST(CommHooks, TheFp16WrapperAroundAllreduceIsFp16Compress) {
  const auto wrapped = train(
      [](Communicator& c) { return std::make_unique<CompressionWrapper>(torch::kHalf, std::make_unique<AllReduceHook>(c)); },
      2);
  const auto plain = train([](Communicator& c) { return hook(c, "fp16_compress"); }, 2);
  for (size_t s = 0; s < 2; ++s) EXPECT_TRUE(torch::equal(wrapped[0].grads[s], plain[0].grads[s])) << "step " << s;
}

TEST(CommHooks, NoopLeavesEveryRankItsOwnGradient) {
  const auto local = local_gradients();
  const auto results = train([](Communicator& c) { return hook(c, "noop"); }, 1);
  for (int64_t r = 0; r < kRanks; ++r) EXPECT_TRUE(torch::equal(results[static_cast<size_t>(r)].grads[0], local[static_cast<size_t>(r)]));
  EXPECT_EQ(results[0].traffic.hook_bytes, 0);
}

// PowerSGD's elements per iteration: n·m for a gradient not worth compressing, (n+m)·r for one that is.
double powersgd_ratio(int64_t rank, double min_compression_rate) {
  auto net = make_net();
  int64_t before = 0, after = 0;
  for (const auto& p : net->parameters()) {
    const int64_t n = p.size(0), m = p.numel() / n, r = std::min({n, m, rank});
    before += n * m;
    after += (n + m) * r * min_compression_rate < n * m ? (n + m) * r : n * m;
  }
  return static_cast<double>(after) / static_cast<double>(before);
}

TEST(CommHooks, PowerSGDAllReducesPlainlyUntilItsStartAndThenSendsWhatItsFormulaSays) {
  const auto plain = train([](Communicator& c) { return hook(c, "allreduce"); }, 4);
  const auto compressed =
      train([](Communicator& c) { return hook(c, "powersgd:start_powersgd_iter=2,min_compression_rate=1"); }, 4);
  for (size_t s = 0; s < 2; ++s) {
    EXPECT_TRUE(torch::allclose(compressed[0].grads[s], plain[0].grads[s], 1e-6, 1e-7)) << "step " << s;
  }
  EXPECT_FALSE(torch::allclose(compressed[0].grads[2], plain[0].grads[2], 1e-3, 1e-5)) << "compression started";
  EXPECT_TRUE(torch::equal(compressed[0].grads[3], compressed[1].grads[3])) << "ranks agree";
  const auto& traffic = compressed[0].traffic;
  EXPECT_DOUBLE_EQ(static_cast<double>(traffic.hook_bytes) / static_cast<double>(traffic.bucket_bytes),
                   powersgd_ratio(1, 1.0));
  EXPECT_LT(traffic.hook_bytes, traffic.bucket_bytes);
}

TEST(CommHooks, PowerSGDCountsOnlySynchronizingIterations) {
  // 3 micro-batches per step: the iteration advances once per step, never inside no_sync.
  const auto results =
      train([](Communicator& c) { return hook(c, "powersgd:start_powersgd_iter=3"); }, 4, /*micro=*/3);
  EXPECT_EQ(results[0].state.child("comm_hook").child("state").get_int("iteration"), 4);
}

TEST(CommHooks, PowerSGDAtFullRankReproducesTheMean) {
  // With r >= the smaller side, P spans the summed gradient's column space and P·Qᵀ is the mean.
  const auto plain = train([](Communicator& c) { return hook(c, "allreduce"); }, 4);
  for (const char* spec : {"powersgd:start_powersgd_iter=2,matrix_approximation_rank=64,min_compression_rate=0.01",
                           "batched_powersgd:start_powersgd_iter=2,matrix_approximation_rank=64"}) {
    const auto full = train([&](Communicator& c) { return hook(c, spec); }, 4);
    ASSERT_EQ(full[0].grads.size(), 4u) << spec;
    for (size_t s = 0; s < 4; ++s) {
      EXPECT_TRUE(torch::allclose(full[0].grads[s], plain[0].grads[s], 1e-4, 1e-5))
          << spec << ", step " << s << ": max difference "
          << (full[0].grads[s] - plain[0].grads[s]).abs().max().item<double>();
    }
  }
}

TEST(CommHooks, PowerSGDWorksWithEveryReducerOptionAndAccumulation) {
  // At full rank PowerSGD is the mean: with static_graph, bucket views, find_unused_parameters and
  // no_sync micro-batches it must average exactly as the default hook does under the same options.
  const std::string full = "powersgd:start_powersgd_iter=2,matrix_approximation_rank=64,min_compression_rate=0.01";
  for (int combination = 0; combination < 8; ++combination) {
    ReducerOptions options;
    options.static_graph = combination & 1;
    options.gradient_as_bucket_view = combination & 2;
    options.find_unused_parameters = combination & 4;
    for (const int64_t micro : {1, 3}) {
      const std::string what = "static_graph=" + std::to_string(options.static_graph) + " bucket_view=" +
                               std::to_string(options.gradient_as_bucket_view) + " find_unused=" +
                               std::to_string(options.find_unused_parameters) + " micro=" + std::to_string(micro);
      const double tiny = 300.0 / (1 << 20);
      const auto plain = train([](Communicator& c) { return hook(c, "allreduce"); }, 4, micro, {}, 0, tiny, {}, options);
      const auto compressed = train([&](Communicator& c) { return hook(c, full); }, 4, micro, {}, 0, tiny, {}, options);
      ASSERT_EQ(compressed[0].grads.size(), 4u) << what;
      for (size_t step = 0; step < 4; ++step) {
        EXPECT_TRUE(torch::allclose(compressed[0].grads[step], plain[0].grads[step], 1e-4, 1e-5)) << what << ", step " << step;
      }
      EXPECT_EQ(compressed[0].state.child("comm_hook").child("state").get_int("iteration"), 4) << what;
    }
  }
}

TEST(CommHooks, PowerSGDResumesBitwiseFromItsState) {
  // Several tiny buckets, a checkpoint after 4 steps (compression from step 2): a new reducer that
  // loads each rank's state continues exactly like the uninterrupted run.
  const double tiny = 300.0 / (1 << 20);
  for (const char* spec : {"powersgd:start_powersgd_iter=2", "batched_powersgd:start_powersgd_iter=2",
                           "powersgd:start_powersgd_iter=2,warm_start=false,batch_tensors_with_same_shape=true"}) {
    auto make = [&](Communicator& c) { return hook(c, spec); };
    const auto whole = train(make, 6, 1, {}, 0, tiny);
    Nets nets = fresh_nets();
    const auto first = train(make, 4, 1, {}, 0, tiny, nets);
    EXPECT_EQ(first[0].state.child("comm_hook").child("state").get_int("iteration"), 4) << spec;
    const auto second = train(make, 2, 1, {first[0].state, first[1].state}, 4, tiny, nets);
    for (int64_t r = 0; r < kRanks; ++r) {
      for (size_t s = 0; s < 2; ++s) {
        EXPECT_TRUE(torch::equal(second[static_cast<size_t>(r)].grads[s], whole[static_cast<size_t>(r)].grads[s + 4]))
            << spec << ", rank " << r << ", step " << s + 4;
      }
    }
  }
}

TEST(CommHooks, PowerSGDOnAnotherBucketLayoutRestartsItsMemoriesWithOneWarning) {
  // Saved with several tiny buckets, loaded by a reducer whose cap makes one bucket (the same
  // world size, another bucket_cap_mb): the iteration and the random state carry on, the error
  // feedback and P/Q memories of buckets that no longer exist restart, and rank 0 says so.
  auto make = [](Communicator& c) { return hook(c, "powersgd:start_powersgd_iter=2"); };
  Nets nets = fresh_nets();
  const auto first = train(make, 4, 1, {}, 0, 300.0 / (1 << 20), nets);
  const auto saved = first[0].state.child("comm_hook").child("state");
  ASSERT_GT(saved.get_ints("bucket_numel").size(), 1u) << "saved with several buckets, or this test proves nothing";
  ASSERT_FALSE(saved.child("p").empty()) << "saved with P memories, or this test proves nothing";

  ::testing::internal::CaptureStderr();
  const auto loaded = train(make, 0, 1, {first[0].state, first[1].state}, 4, 25.0, nets);
  const std::string warnings = ::testing::internal::GetCapturedStderr();
  const std::string warning = "the checkpoint's error feedback and P/Q memories were saved for other buckets; "
                              "they restart";
  const auto at = warnings.find(warning);
  ASSERT_NE(at, std::string::npos) << warnings;
  EXPECT_EQ(warnings.find(warning, at + 1), std::string::npos) << "rank 0 alone warns:\n" << warnings;

  for (int64_t r = 0; r < kRanks; ++r) {
    const auto state = loaded[static_cast<size_t>(r)].state.child("comm_hook").child("state");
    EXPECT_EQ(state.get_int("iteration"), 4) << "rank " << r << ": the iteration carries on";
    EXPECT_EQ(state.get_string("rng"),
              first[static_cast<size_t>(r)].state.child("comm_hook").child("state").get_string("rng"))
        << "rank " << r << ": the random state carries on";
    EXPECT_EQ(state.get_ints("bucket_numel").size(), 1u) << "rank " << r << ": this run's layout";
    EXPECT_TRUE(state.child("error").empty() && state.child("p").empty() && state.child("q").empty())
        << "rank " << r << ": the memories restart";
  }
}

TEST(CommHooks, NumpyRandomStateDrawsWhatNumpyDraws) {
  // numpy.random.RandomState(seed).randint(1_000_000_000), six times (python3-numpy 1.24).
  const std::map<uint32_t, std::vector<int64_t>> numpy{
      {0, {209652396, 398764591, 924231285, 404868288, 441365315, 463622907}},
      {42, {534895718, 199900595, 862061404, 787846414, 996406378, 127521863}},
      {4294967295u, {419326371, 479346978, 697429004, 269265991, 167655348, 113049152}}};
  for (const auto& [seed, expected] : numpy) {
    NumpyRandomState rng(seed);
    for (size_t i = 0; i < expected.size(); ++i) EXPECT_EQ(rng.randint(1'000'000'000), expected[i]) << "seed " << seed;
    NumpyRandomState copy;
    copy.load(rng.save());
    EXPECT_EQ(copy.randint(1'000'000'000), rng.randint(1'000'000'000)) << "saved and restored mid-stream";
  }
  // torch.manual_seed(123); torch.randn(3, 1)
  const auto drawn = torch::randn({3, 1}, seeded_cpu_generator(123)).flatten();
  const auto python = torch::tensor({-0.11146711558103561, 0.12036294490098953, -0.3696345090866089}, torch::kFloat);
  EXPECT_TRUE(torch::equal(drawn, python)) << drawn;
}

std::string error_of(const std::function<void()>& body) {
  try {
    body();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Builds a Trainer (no fit): what the options fail with, at construction.
void trainer_with(const std::string& strategy, const std::string& precision) {
  auto options = testing::quiet_options("/tmp");
  options.strategy = strategy;
  options.precision = precision;
  Trainer trainer(options);
}

TEST(CommHooks, BadCombinationsFailWhenTheTrainerIsBuilt) {
  EXPECT_NE(error_of([&] { trainer_with("ddp:comm_hook=powersgd,start_powersgd_iter=1", "32-true"); })
                .find("expected start_powersgd_iter > 1 with error feedback or warm start"),
            std::string::npos);
  EXPECT_EQ(error_of([&] {
              trainer_with("ddp:comm_hook=powersgd,start_powersgd_iter=1,use_error_feedback=false,warm_start=false",
                           "32-true");
            }),
            "");
  EXPECT_NE(error_of([&] { trainer_with("ddp:comm_hook=powersgd,matrix_approximation_rank=0", "32-true"); })
                .find("matrix_approximation_rank"),
            std::string::npos);
  EXPECT_NE(error_of([&] { trainer_with("ddp:comm_hook=powersgd,orthogonalization_epsilon=-1e-8", "32-true"); })
                .find("option 'orthogonalization_epsilon' expects a value >= 0"),
            std::string::npos);
  EXPECT_NE(error_of([&] { trainer_with("ddp:comm_hook=noop,comm_wrapper=fp16", "32-true"); }).find("nothing to compress"),
            std::string::npos);
  EXPECT_NE(error_of([&] { trainer_with("ddp:comm_hook=fp16_compress", "bf16-true"); }).find("already"),
            std::string::npos);
  EXPECT_NE(error_of([&] { trainer_with("ddp:ddp_comm_wrapper=bf16,ddp_comm_hook=powersgd", "bf16-true"); })
                .find("nothing to compress"),
            std::string::npos)
      << "Lightning's key names work too";
  EXPECT_NE(error_of([&] { trainer_with("ddp:matrix_approximation_rank=2", "32-true"); }).find("powersgd"),
            std::string::npos)
      << "a PowerSGD key without comm_hook=powersgd names the hook it belongs to";
}

// DDP checks a hook by the traits its spec carries from where it was registered, not by its name: a user's hook that
// compresses is refused under a wrapper and with a 16-bit precision, as fp16_compress is.
TEST(CommHooks, AUsersHookIsCheckedByTheTraitsItWasRegisteredWith) {
  add_comm_hook(
      comm_hook_registry(), "test_half_hook", "all-reduce in float16 (a test's hook)",
      [](Communicator& c) { return std::make_unique<CompressionWrapper>(torch::kHalf, std::make_unique<AllReduceHook>(c)); },
      {.compresses_to_16_bits = true});
  EXPECT_TRUE(comm_hook_registry().create("test_half_hook")->traits().compresses_to_16_bits);
  EXPECT_FALSE(comm_hook_registry().create("allreduce")->traits().compresses_to_16_bits);
  EXPECT_FALSE(comm_hook_registry().create("noop")->traits().communicates);
  EXPECT_TRUE(comm_hook_registry().create("powersgd")->traits().multiplies_matrices);
  EXPECT_TRUE(comm_hook_registry().create("post_local_sgd:model_averaging_period=4")->traits().steps_locally);
  EXPECT_NE(error_of([&] { trainer_with("ddp:comm_hook=test_half_hook,comm_wrapper=bf16", "32-true"); })
                .find("comm_hook=test_half_hook already compresses to 16 bits"),
            std::string::npos);
  EXPECT_NE(error_of([&] { trainer_with("ddp:comm_hook=test_half_hook", "bf16-true"); }).find("nothing to compress"),
            std::string::npos);
  EXPECT_EQ(error_of([&] { trainer_with("ddp:comm_hook=test_half_hook", "32-true"); }), "");
}

TEST(CommHooks, Fp16AroundPowerSGDNeedsFloat16MatrixProducts) {
  if (float16_matmul_available(torch::kCPU)) GTEST_SKIP() << "this LibTorch multiplies float16 matrices on the CPU";
  testing::TemporaryDirectory dir;
  auto options = testing::quiet_options(dir.path());
  options.strategy = "ddp:comm_hook=powersgd,comm_wrapper=fp16";
  options.max_epochs = 1;
  Trainer trainer(options);
  try {
    trainer.fit(std::make_shared<testing::RegressionModule>(), std::make_shared<testing::RegressionData>(8, 4));
    FAIL() << "expected NotSupportedError";
  } catch (const NotSupportedError& e) {
    EXPECT_NE(std::string(e.what()).find("comm_wrapper=bf16"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace volt::ddp
