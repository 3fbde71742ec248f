// Note [Replaced gradient accumulators]: converting a module's parameters after the Reducer was
// built replaces their gradient accumulators, so the Reducer's hooks never fire. With or without
// find_unused_parameters that is an InternalError saying gradients were NOT synchronized, never
// a silent success; and a synchronized backward in which no parameter got a gradient at all is
// one too. 2 ranks as threads over Gloo.
#include <gtest/gtest.h>

#include "core/error.h"
#include "strategies/ddp/reducer.h"
#include "tests/ddp/reducer_harness.h"
#include "tests/distributed/thread_ranks.h"

namespace volt::ddp {
namespace {

using harness::make_net;
using harness::names_of;
using harness::tiny_buckets;
using testing::with_communicators;

class ReplacedAccumulatorsTest : public ::testing::TestWithParam<bool> {
 protected:
  ReducerOptions options() const {
    auto o = tiny_buckets();
    o.find_unused_parameters = GetParam();
    return o;
  }
};

TEST_P(ReplacedAccumulatorsTest, ConvertingTheParametersAfterBuildingTheReducerIsAnInternalError) {
  with_communicators(2, [&](Communicator& comm) {
    auto net = make_net();
    Reducer reducer(net->parameters(), names_of(*net), comm, options());
    net->to(torch::kDouble);
    auto loss = net->forward(torch::ones({2, 8}, torch::kDouble), false).sum();
    try {
      reducer.prepare_for_backward(loss);
      loss.backward();
      reducer.finalize_backward();
      ADD_FAILURE() << "rank " << comm.rank() << ": the iteration succeeded without synchronizing";
    } catch (const InternalError& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("ddp (rank " + std::to_string(comm.rank()) + " of 2)"), std::string::npos) << message;
      EXPECT_NE(message.find("4 of 4 parameter(s) ('first.weight', 'first.bias', 'second.weight', 'second.bias')"),
                std::string::npos)
          << message;
      EXPECT_NE(message.find("converted or moved after the reducer was built"), std::string::npos) << message;
      EXPECT_NE(message.find("'first.weight' is now double on cpu, its bucket holds float on cpu"), std::string::npos)
          << message;
      EXPECT_NE(message.find("gradients were NOT synchronized"), std::string::npos) << message;
    }
    EXPECT_EQ(comm.counters().total_calls(), 0) << "detected before any collective";
  });
}

TEST_P(ReplacedAccumulatorsTest, ConvertingToTheSameDtypeChangesNothing) {
  with_communicators(2, [&](Communicator& comm) {
    auto net = make_net();
    Reducer reducer(net->parameters(), names_of(*net), comm, options());
    net->to(torch::kFloat);  // a no-op: the accumulators stay
    auto loss = net->forward(torch::ones({2, 8}) * static_cast<double>(comm.rank() + 1), false).sum();
    reducer.prepare_for_backward(loss);
    loss.backward();
    reducer.finalize_backward();
    auto grad = net->first->bias.grad().clone();
    auto first = grad.clone();
    comm.broadcast(first, 0);
    EXPECT_TRUE(torch::equal(grad, first)) << "rank " << comm.rank() << ": gradients synchronized";
  });
}

TEST_P(ReplacedAccumulatorsTest, ABackwardInWhichNoParameterGetsAGradientIsAnInternalError) {
  with_communicators(2, [&](Communicator& comm) {
    auto net = make_net();
    Reducer reducer(net->parameters(), names_of(*net), comm, options());
    auto x = torch::ones({3}, torch::requires_grad());
    auto loss = (x * 2.0).sum();  // no parameter of the module takes part
    reducer.prepare_for_backward(loss);
    loss.backward();
    try {
      reducer.finalize_backward();
      ADD_FAILURE() << "rank " << comm.rank() << ": no error";
    } catch (const InternalError& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find(std::string("no parameter received a gradient in this synchronized backward ") +
                             (GetParam() ? "on any rank" : "on this rank")),
                std::string::npos)
          << message;
      EXPECT_NE(message.find("gradients were NOT synchronized"), std::string::npos) << message;
    }
    if (GetParam()) {
      for (const auto& p : net->parameters()) EXPECT_FALSE(p.grad().defined()) << "no gradient is made up";
    }
    comm.barrier();  // every rank completed its reductions: still in step
  });
}

INSTANTIATE_TEST_SUITE_P(FindUnusedParameters, ReplacedAccumulatorsTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "FindUnused" : "Default"; });

}  // namespace
}  // namespace volt::ddp
