// Note [all_reduce in place through shared memory]: a tensor in buffers every rank of the group
// mapped (SharedMemoryGroup::allocate_buffers, Communicator::allocate_buffers) is reduced where it
// lies, to the same bits as through the slots, for every dtype and op, whole buffers and parts of
// them; the buffers outlive the group and leave nothing in /dev/shm; ranks that reduce different
// places fail naming both calls; DDP's buckets live there when the group reduces through shared
// memory, and only then.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>

#include "core/error.h"
#include "distributed/communicator.h"
#include "distributed/transports/shared_memory_group.h"
#include "strategies/ddp/reducer.h"
#include "tests/distributed/shared_memory_support.h"
#include "tests/distributed/thread_ranks.h"

namespace volt {
namespace {

using testing::exchange_over;
using testing::join_group;
using testing::segments_of;
using testing::values_of;
using testing::with_communicators;

// Whether `tensor`'s data lies in a mapping of one of volt's shared-memory segments (its name
// removed: "(deleted)").
bool in_shared_segment(const torch::Tensor& tensor) {
  const auto address = reinterpret_cast<uintptr_t>(tensor.data_ptr());
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    if (line.find("/volt-shm-") == std::string::npos) continue;
    std::istringstream fields(line);
    std::string range;
    fields >> range;
    const auto dash = range.find('-');
    const uintptr_t begin = std::stoull(range.substr(0, dash), nullptr, 16);
    const uintptr_t end = std::stoull(range.substr(dash + 1), nullptr, 16);
    if (address >= begin && address < end) return true;
  }
  return false;
}

TEST(SharedMemoryBuffers, InPlaceGivesTheSameBitsAsThroughTheSlots) {
  for (const int64_t world : {2, 3}) {
    with_communicators(world, [&](Communicator& c) {
      auto group = join_group(c);
      ASSERT_NE(group, nullptr);
      // 300001 elements span several of a rank's 256 KiB blocks; 1 and 17 end inside a cache line.
      const std::vector<int64_t> numels{1, 17, 5000, 300001};
      for (const auto dtype : {torch::kFloat, torch::kDouble, torch::kInt, torch::kLong, torch::kHalf, torch::kBFloat16}) {
        auto buffers = group->allocate_buffers(exchange_over(c), numels, std::vector<c10::ScalarType>(4, dtype));
        ASSERT_EQ(buffers.size(), numels.size());
        for (const auto op : {ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::Min}) {
          if (!SharedMemoryGroup::accepts(buffers[0], op)) continue;
          for (size_t i = 0; i < numels.size(); ++i) {
            EXPECT_TRUE(torch::equal(buffers[i], torch::zeros_like(buffers[i]))) << "zeroed at first";
            auto reference = values_of(c.rank(), numels[i], dtype);
            buffers[i].copy_(reference);
            group->all_reduce(buffers[i], op);
            group->all_reduce(reference, op);
            ASSERT_TRUE(torch::equal(buffers[i], reference))
                << "world " << world << ", rank " << c.rank() << ", " << dtype << ", op " << op_name(op) << ", numel "
                << numels[i];
            buffers[i].zero_();
          }
        }
        // A part of a buffer, at the same place on every rank.
        auto part = buffers[3].narrow(0, 1001, 20000);
        part.copy_(values_of(c.rank(), 20000, dtype));
        auto reference = values_of(c.rank(), 20000, dtype);
        group->all_reduce(part, ReduceOp::Max);
        group->all_reduce(reference, ReduceOp::Max);
        EXPECT_TRUE(torch::equal(part, reference)) << "part of a buffer, " << dtype;
        EXPECT_TRUE(torch::equal(buffers[3].narrow(0, 0, 1001), torch::zeros({1001}, dtype))) << "the rest untouched";
      }
      group->barrier();
    });
  }
}

TEST(SharedMemoryBuffers, OutliveTheGroupAndLeaveNothingInDevShm) {
  with_communicators(2, [&](Communicator& c) {
    std::vector<torch::Tensor> buffers;
    {
      auto group = join_group(c);
      ASSERT_NE(group, nullptr);
      buffers = group->allocate_buffers(exchange_over(c), {1000}, {torch::kFloat});
      ASSERT_EQ(buffers.size(), 1u);
      EXPECT_TRUE(in_shared_segment(buffers[0]));
      buffers[0].fill_(static_cast<double>(c.rank() + 1));
      group->all_reduce(buffers[0], ReduceOp::Sum);
      EXPECT_TRUE(torch::equal(buffers[0], torch::full({1000}, 3.0)));
    }
    c.barrier();
    if (c.rank() == 0) {
      EXPECT_EQ(segments_of(::getpid()), 0) << "names are removed once every rank mapped the segment";
    }
    buffers[0].add_(1);  // still mapped
    EXPECT_TRUE(torch::equal(buffers[0], torch::full({1000}, 4.0)));
  });
}

// A rank whose tensor is in the buffers and one whose is not (or at another place) disagree:
// both fail naming the calls, rather than one reducing another's memory.
TEST(SharedMemoryBuffers, RanksThatReduceDifferentPlacesFailNamingBoth) {
  with_communicators(2, [&](Communicator& c) {
    auto group = join_group(c);
    ASSERT_NE(group, nullptr);
    auto buffers = group->allocate_buffers(exchange_over(c), {200}, {torch::kFloat});
    auto tensor = c.rank() == 0 ? buffers[0].narrow(0, 0, 100) : torch::ones({100});
    try {
      group->all_reduce(tensor, ReduceOp::Sum);
      ADD_FAILURE() << "expected a DistributedError on rank " << c.rank();
    } catch (const DistributedError& e) {
      EXPECT_NE(std::string(e.what()).find("in place, in buffer segment 0 at byte 0"), std::string::npos) << e.what();
    }
  });
}

// The Communicator hands out buffers in shared memory where its all_reduce goes through shared
// memory, plain tensors otherwise; DDP's buckets are those buffers, and reduce to the same values.
TEST(SharedMemoryBuffers, TheCommunicatorAndDdpBucketsUseThemOnlyThroughSharedMemory) {
  for (const bool shared_memory : {true, false}) {
    with_communicators(2, [&](CommunicatorOptions& options) { options.shared_memory = shared_memory; }, [&](Communicator& c) {
      auto buffers = c.allocate_buffers({64, 8}, {torch::kFloat, torch::kBFloat16});
      ASSERT_EQ(buffers.size(), 2u);
      EXPECT_EQ(buffers[1].scalar_type(), torch::kBFloat16);
      for (const auto& buffer : buffers) {
        EXPECT_EQ(in_shared_segment(buffer), shared_memory) << "rank " << c.rank();
        EXPECT_TRUE(torch::equal(buffer, torch::zeros_like(buffer)));
      }
      buffers[0].fill_(static_cast<double>(c.rank()) + 0.5);
      c.all_reduce(buffers[0], ReduceOp::Mean);
      EXPECT_TRUE(torch::equal(buffers[0], torch::full({64}, 1.0)));

      torch::manual_seed(0);
      auto model = torch::nn::Linear(8, 4);
      ddp::Reducer reducer(model->parameters(), {"weight", "bias"}, c, ddp::ReducerOptions{});
      ASSERT_GE(reducer.num_buckets(), 1u);
      EXPECT_EQ(in_shared_segment(reducer.bucket(0).buffer()), shared_memory) << "rank " << c.rank();
      auto x = torch::full({2, 8}, static_cast<double>(c.rank() + 1));
      auto loss = model->forward(x).sum();
      reducer.prepare_for_backward(loss);
      loss.backward();
      reducer.finalize_backward();
      // Mean of the two ranks' gradients: d(sum)/d(weight) is the column sum of x, 2·(r+1).
      EXPECT_TRUE(torch::allclose(model->weight.grad(), torch::full({4, 8}, 3.0))) << model->weight.grad();
      EXPECT_TRUE(torch::allclose(model->bias.grad(), torch::full({4}, 2.0)));
    });
  }
}

}  // namespace
}  // namespace volt
