// ShardedReducer on ranks as threads (2 and 3): after a synchronized backward each owner holds the
// mean gradient of its parameters (equal to an all_reduce of every rank's gradients within float
// rounding) and every other rank none; buckets follow reduce_buffer_size and lay their members out
// by owner; every rank sends, per bucket, what it does not own (one reduce_scatter_chunks each);
// the buffer counter sees every bucket's buffers; float16 travel stays within float16 rounding;
// no_sync accumulates locally and reduces the window's sum once.
#include <gtest/gtest.h>

#include "distributed/communicator.h"
#include "strategies/sharded/partition.h"
#include "strategies/sharded/sharded_reducer.h"
#include "tests/distributed/thread_ranks.h"

namespace volt {
namespace {

using testing::with_communicators;

// Linear(8,16) → Linear(16,16) → Linear(16,4): parameters of 128, 16, 256, 16, 64, 4 elements.
struct Net {
  torch::nn::Sequential net = seeded();
  // The same weights on every rank: the threads share the global generator, so each draws from its own.
  static torch::nn::Sequential seeded() {
    torch::nn::Sequential net(torch::nn::Linear(8, 16), torch::nn::Tanh(), torch::nn::Linear(16, 16),
                              torch::nn::Tanh(), torch::nn::Linear(16, 4));
    auto generator = at::detail::createCPUGenerator(3);
    torch::NoGradGuard no_grad;
    for (auto& p : net->parameters()) p.copy_(torch::randn(p.sizes(), generator) * 0.3);
    return net;
  }
  std::vector<torch::Tensor> parameters() const { return net->parameters(); }
  // Rank `rank`'s loss on micro-batch `micro`.
  torch::Tensor loss(int64_t rank, int64_t micro) {
    auto generator = at::detail::createCPUGenerator(static_cast<uint64_t>(100 * rank + micro));
    return net->forward(torch::randn({5, 8}, generator)).pow(2).sum();
  }
};

std::vector<std::string> names_of(Net& model) {
  std::vector<std::string> names;
  for (const auto& item : model.net->named_parameters()) names.push_back(item.key());
  return names;
}

// The mean over ranks of the gradients of `micros` micro-batches (summed), by all_reduce.
std::vector<torch::Tensor> reference_gradients(Communicator& comm, int64_t micros) {
  Net model;
  for (int64_t m = 0; m < micros; ++m) model.loss(comm.rank(), m).backward();
  std::vector<torch::Tensor> grads;
  for (const auto& p : model.parameters()) {
    auto g = p.grad().clone();
    comm.all_reduce(g, ReduceOp::Mean);
    grads.push_back(g);
  }
  return grads;
}

struct Window {
  int64_t reduce_buffer_size = 200;
  bool reduce_fp16 = false;
  int64_t micros = 1;  // micro-batches in the window: all but the last under no_sync
};

void check_run(int64_t world, const Window& run, double tolerance) {
  with_communicators(world, [&](Communicator& comm) {
    const auto expected = reference_gradients(comm, run.micros);
    Net model;
    const auto params = model.parameters();
    const auto owners = partition_parameters({params}, comm.size()).owner.front();
    ShardedReducerOptions options;
    options.reduce_buffer_size = run.reduce_buffer_size;
    options.reduce_fp16 = run.reduce_fp16;
    ShardedReducer reducer(params, names_of(model), owners, comm, options);
    comm.reset_counters();
    for (int64_t m = 0; m < run.micros; ++m) {
      reducer.set_require_sync(m + 1 == run.micros);
      reducer.prepare_for_backward(torch::Tensor());
      model.loss(comm.rank(), m).backward();
      reducer.finalize_backward();
    }
    for (size_t i = 0; i < params.size(); ++i) {
      if (owners[i] != comm.rank()) {
        EXPECT_FALSE(params[i].grad().defined()) << "rank " << comm.rank() << " does not own parameter " << i;
        continue;
      }
      ASSERT_TRUE(params[i].grad().defined()) << "rank " << comm.rank() << " owns parameter " << i;
      EXPECT_TRUE(torch::allclose(params[i].grad(), expected[i], tolerance, tolerance))
          << "rank " << comm.rank() << " parameter " << i << " max error "
          << (params[i].grad() - expected[i]).abs().max().item<double>();
    }
    // Buckets, the bytes sent and the buffers alive.
    const int64_t element = run.reduce_fp16 ? 2 : 4;
    int64_t sent = 0, largest_bucket = 0, all_buckets = 0;
    const auto buckets = reducer.buckets();
    for (const auto& bucket : buckets) {
      int64_t numel = 0, mine = 0;
      for (size_t j = 0; j < bucket.size(); ++j) {
        numel += params[bucket[j]].numel();
        if (owners[bucket[j]] == comm.rank()) mine += params[bucket[j]].numel();
        if (j > 0) {
          EXPECT_LE(owners[bucket[j - 1]], owners[bucket[j]]) << "a buffer is laid out by owner";
        }
      }
      EXPECT_TRUE(bucket.size() == 1 || run.reduce_buffer_size == 0 || numel <= run.reduce_buffer_size);
      if (run.reduce_buffer_size == 0) {
        EXPECT_EQ(bucket.size(), 1u);
      }
      sent += (numel - mine) * element;
      const bool lone_in_place = bucket.size() == 1 && !run.reduce_fp16;
      const int64_t bucket_bytes = (mine + (lone_in_place ? 0 : numel)) * element;
      largest_bucket = std::max(largest_bucket, bucket_bytes);
      all_buckets += bucket_bytes;
    }
    const auto counted = comm.counters()[CollectiveKind::ReduceScatter];
    EXPECT_EQ(counted.calls, static_cast<int64_t>(buckets.size())) << "one reduce_scatter per bucket";
    EXPECT_EQ(counted.sent_bytes, sent) << "rank " << comm.rank() << " sends what it does not own, once";
    // Buckets in flight together hold their buffers together; never more than all of them.
    EXPECT_GE(reducer.peak_buffer_bytes(), largest_bucket) << "rank " << comm.rank();
    EXPECT_LE(reducer.peak_buffer_bytes(), all_buckets) << "rank " << comm.rank();
  });
}

class ShardedReducerTest : public ::testing::TestWithParam<int64_t> {};

TEST_P(ShardedReducerTest, OwnersHoldTheMeanGradientAndOthersNone) {
  check_run(GetParam(), Window{}, 1e-6);
}

TEST_P(ShardedReducerTest, EveryGradientAloneWithoutSharedBuffers) {
  check_run(GetParam(), Window{.reduce_buffer_size = 0}, 1e-6);
}

TEST_P(ShardedReducerTest, Float16TravelStaysWithinItsRounding) {
  check_run(GetParam(), Window{.reduce_fp16 = true}, 1e-2);
}

TEST_P(ShardedReducerTest, NoSyncAccumulatesAndReducesTheWindowOnce) {
  check_run(GetParam(), Window{.micros = 3}, 1e-5);
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, ShardedReducerTest, ::testing::Values(2, 3),
                         [](const auto& info) { return "world" + std::to_string(info.param); });

TEST(ShardedReducerBuckets, ParametersShareBucketsInBackwardOrderUpToTheBufferSize) {
  with_communicators(2, [](Communicator& comm) {
    Net model;
    const auto params = model.parameters();  // 128, 16, 256, 16, 64, 4 elements
    ShardedReducerOptions options;
    options.reduce_buffer_size = 200;
    ShardedReducer reducer(params, names_of(model), {0, 1, 0, 1, 1, 0}, comm, options);
    // Reverse order: {4, 64, 16} (84 elements), then 256 alone, then {16, 128}; each laid out by
    // owner (rank 0's first, backward order within an owner).
    EXPECT_EQ(reducer.buckets(), (std::vector<std::vector<size_t>>{{5, 4, 3}, {2}, {0, 1}}));
  });
}

}  // namespace
}  // namespace volt
