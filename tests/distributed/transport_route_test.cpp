// The routing table of a process-group communicator (Note [One route per collective] in
// distributed/transports/transports.h): which transport carries each collective, given what the
// group joined, the backend, the tensor's dtype and the op.
#include <gtest/gtest.h>

#include <chrono>

#include "distributed/transports/transports.h"
#include "tests/distributed/shared_memory_support.h"
#include "tests/distributed/thread_ranks.h"

namespace volt::testing {
namespace {

using std::chrono::seconds;

// One rank's Transports with no side transport (no ring thread, no inline context, no shared memory).
Transports bare_transports(const std::string& backend) {
  ProcessGroupSetup setup;
  setup.backend = backend;
  return Transports(setup, /*rank=*/0, /*size=*/1, seconds(5));
}

TEST(TransportRoute, GlooWithoutSideTransportsUsesTheProcessGroupAndVoltsRings) {
  const auto transports = bare_transports("gloo");
  const auto values = torch::ones({4});
  EXPECT_EQ(transports.route(Collective::AllReduce, values), Transport::ProcessGroup);
  EXPECT_EQ(transports.route(Collective::Reduce, values), Transport::ProcessGroup);
  EXPECT_EQ(transports.route(Collective::Broadcast, values), Transport::ProcessGroup);
  EXPECT_EQ(transports.route(Collective::AllGather, values), Transport::ProcessGroup);
  EXPECT_EQ(transports.route(Collective::Gather, values), Transport::ProcessGroup);
  EXPECT_EQ(transports.route(Collective::Barrier, torch::Tensor()), Transport::ProcessGroup);
  // c10d's Gloo has no reduce_scatter (Note [Gloo reduce_scatter]); uneven chunks run on rings.
  EXPECT_EQ(transports.route(Collective::ReduceScatter, values), Transport::Ring);
  EXPECT_EQ(transports.route(Collective::ReduceScatterChunks, values), Transport::Ring);
  EXPECT_EQ(transports.route(Collective::AllGatherChunks, values), Transport::Ring);
  // An empty payload moves nothing (Gloo's own would divide by zero).
  EXPECT_EQ(transports.route(Collective::AllGather, torch::ones({0})), Transport::Nothing);
  EXPECT_EQ(transports.route(Collective::Gather, torch::ones({0})), Transport::Nothing);
  EXPECT_EQ(transports.route(Collective::AllReduce, torch::ones({0})), Transport::ProcessGroup);
}

TEST(TransportRoute, NcclReducesScattersNativelyAndPadsUnevenChunks) {
  const auto transports = bare_transports("nccl");
  const auto values = torch::ones({4});
  EXPECT_EQ(transports.route(Collective::ReduceScatter, values), Transport::ProcessGroup);
  EXPECT_EQ(transports.route(Collective::ReduceScatterChunks, values), Transport::Padding);
  EXPECT_EQ(transports.route(Collective::AllGatherChunks, values), Transport::Padding);
  EXPECT_EQ(transports.route(Collective::AllReduce, values), Transport::ProcessGroup);
}

// Two ranks on this host join shared memory; it takes what it accepts (Note [Collectives through
// shared memory]): reductions of the dtypes and ops it sums, data movement of any dense tensor.
TEST(TransportRoute, SharedMemoryTakesWhatItAcceptsAndLeavesTheRest) {
  with_communicators(2, [](Communicator& c) {
    ProcessGroupSetup setup;
    setup.backend = "gloo";
    setup.shared_memory = true;
    Transports transports(setup, c.rank(), c.size(), seconds(30));
    transports.join_host_memory(setup, exchange_over(c), c.rank(), c.size(), seconds(30), "test group");
    ASSERT_TRUE(transports.has_shared_memory()) << "rank " << c.rank();
    const auto floats = torch::ones({4});
    const auto longs = torch::ones({4}, torch::kLong);
    EXPECT_EQ(transports.route(Collective::AllReduce, floats, ReduceOp::Mean), Transport::SharedMemory);
    EXPECT_EQ(transports.route(Collective::AllReduce, longs, ReduceOp::Sum), Transport::SharedMemory);
    // An integer Mean is not one it sums: the process group then.
    EXPECT_EQ(transports.route(Collective::AllReduce, longs, ReduceOp::Mean), Transport::ProcessGroup);
    EXPECT_EQ(transports.route(Collective::ReduceScatter, longs, ReduceOp::Mean), Transport::Ring);
    EXPECT_EQ(transports.route(Collective::ReduceScatter, floats, ReduceOp::Sum), Transport::SharedMemory);
    EXPECT_EQ(transports.route(Collective::Broadcast, torch::ones({4}, torch::kBool)), Transport::SharedMemory);
    EXPECT_EQ(transports.route(Collective::AllGatherChunks, longs), Transport::SharedMemory);
    EXPECT_EQ(transports.route(Collective::Barrier, torch::Tensor()), Transport::SharedMemory);
    c.barrier();  // both ranks done with the segment before either leaves it
  });
}

}  // namespace
}  // namespace volt::testing
