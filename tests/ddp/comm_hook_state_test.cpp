// What the Reducer and its comm hook tell each other: the synchronized iteration in every bucket
// (no_sync backwards never count), the rebuilt bucket layout, and checkpoint state, restored
// exactly into a new reducer (iterations, buckets, hook state; no second rebuild) and refused,
// with a clear error, for another model or another hook. 2 ranks as threads over Gloo.
#include <gtest/gtest.h>

#include <mutex>

#include "core/error.h"
#include "distributed/state_gather.h"
#include "strategies/ddp/reducer.h"
#include "tests/ddp/reducer_harness.h"
#include "tests/distributed/thread_ranks.h"

namespace volt::ddp {
namespace {

using harness::make_net;
using harness::names_of;
using harness::Net;
using harness::tiny_buckets;
using testing::loopback_options;
using testing::run_thread_ranks;
using testing::with_communicators;

// Averages like the default hook and records what it is told; its state differs per rank.
class RecordingHook : public CommHook {
 public:
  explicit RecordingHook(Communicator& c) : inner_(c), residual_(torch::full({2}, static_cast<double>(c.rank()))) {}
  std::string name() const override { return "recording"; }
  CollectiveHandle run(GradBucket& bucket) override {
    seen.emplace_back(bucket.iteration, bucket.index);
    ++runs_;
    return inner_.run(bucket);
  }
  StateDict state_dict() const override {
    StateDict state;
    state.set("runs", runs_);
    state.set("residual", residual_);
    return state;
  }
  void load_state_dict(const StateDict& state) override {
    runs_ = state.get_int("runs");
    residual_ = state.get_tensor("residual");
  }
  void on_buckets_rebuilt(const BucketLayout& layout) override { layouts.push_back(layout); }

  AllReduceHook inner_;
  std::vector<std::pair<int64_t, int64_t>> seen;  // (iteration, bucket index) per run
  std::vector<BucketLayout> layouts;
  int64_t runs_ = 0;
  torch::Tensor residual_;
};

torch::Tensor batch(int64_t rank, int64_t step, int64_t micro) {
  return torch::randn({4, 8}, at::detail::createCPUGenerator(static_cast<uint64_t>(100 * step + 10 * micro + rank)));
}

// One optimizer step of `micro` micro-batches, all but the last inside no_sync.
void step(Reducer& reducer, Net& net, int64_t rank, int64_t index, int64_t micro) {
  for (int64_t m = 0; m < micro; ++m) {
    reducer.set_require_sync(m + 1 == micro);
    auto loss = net.forward(batch(rank, index, m), false).pow(2).mean();
    reducer.prepare_for_backward(loss);
    loss.backward();
    reducer.finalize_backward();
  }
  for (auto& p : net.parameters()) p.mutable_grad().reset();
}

TEST(CommHookStateTest, BucketsCarryTheSynchronizedIterationAndNoSyncNeverCounts) {
  std::vector<std::vector<std::pair<int64_t, int64_t>>> seen(2);
  std::vector<size_t> buckets(2);
  const auto errors = run_thread_ranks(2, [&](int64_t rank, int64_t port) {
    auto comm = Communicator::connect(loopback_options(rank, 2, port));
    auto net = make_net();
    Reducer reducer(net->parameters(), names_of(*net), *comm, tiny_buckets());
    auto hook = std::make_unique<RecordingHook>(*comm);
    auto* recording = hook.get();
    reducer.set_comm_hook(std::move(hook));
    for (int64_t s = 0; s < 3; ++s) step(reducer, *net, rank, s, 3);
    seen[static_cast<size_t>(rank)] = recording->seen;
    buckets[static_cast<size_t>(rank)] = reducer.num_buckets();
    EXPECT_EQ(reducer.synchronized_iterations(), 3);
  });
  for (size_t r = 0; r < 2; ++r) {
    ASSERT_EQ(errors[r], "") << "rank " << r;
    ASSERT_GE(buckets[r], 2u);
    std::vector<std::pair<int64_t, int64_t>> expected;
    for (int64_t s = 0; s < 3; ++s) {
      for (size_t b = 0; b < buckets[r]; ++b) expected.emplace_back(s, static_cast<int64_t>(b));
    }
    EXPECT_EQ(seen[r], expected) << "rank " << r << ": each bucket once per step, numbered by synchronized iteration";
  }
}

TEST(CommHookStateTest, TheHookIsToldTheRebuiltLayout) {
  with_communicators(2, [](Communicator& comm) {
    auto net = make_net();
    Reducer reducer(net->parameters(), names_of(*net), comm, tiny_buckets());
    auto hook = std::make_unique<RecordingHook>(comm);
    auto* recording = hook.get();
    reducer.set_comm_hook(std::move(hook));
    step(reducer, *net, comm.rank(), 0, 1);
    EXPECT_TRUE(recording->layouts.empty()) << "rank " << comm.rank() << ": nothing rebuilt yet";
    step(reducer, *net, comm.rank(), 1, 1);  // rebuilds in its prepare
    ASSERT_TRUE(reducer.buckets_rebuilt());
    ASSERT_EQ(recording->layouts.size(), 1u) << "rank " << comm.rank();
    const auto& layout = recording->layouts[0];
    EXPECT_EQ(layout.members, reducer.bucket_assignment());
    ASSERT_EQ(layout.numel.size(), layout.num_buckets());
    for (size_t b = 0; b < layout.num_buckets(); ++b) {
      int64_t numel = 0;
      for (const size_t index : layout.members[b]) numel += reducer.parameters()[index].numel();
      EXPECT_EQ(layout.numel[b], numel) << "bucket " << b;
      EXPECT_EQ(layout.numel[b], reducer.bucket(b).buffer().numel()) << "bucket " << b;
    }
    step(reducer, *net, comm.rank(), 2, 1);
    EXPECT_EQ(recording->layouts.size(), 1u) << "rebuilt once";
  });
}

// The mean over the ranks of each rank's own gradient of `loss`: the one-process oracle.
torch::Tensor mean_gradient(Communicator& comm, const torch::Tensor& loss, const std::vector<torch::Tensor>& parameters) {
  std::vector<torch::Tensor> parts;
  for (const auto& g : torch::autograd::grad({loss}, parameters, {}, /*retain_graph=*/true)) parts.push_back(g.flatten());
  auto mean = torch::cat(parts);
  comm.all_reduce(mean, ReduceOp::Mean);
  return mean;
}

TEST(CommHookStateTest, StateRestoresAReducerExactlyAndPerRankStateGathersOnRankZero) {
  with_communicators(2, [](Communicator& comm) {
    const int64_t rank = comm.rank();
    auto net = make_net();
    StateDict saved;
    std::vector<std::vector<size_t>> assignment;
    {
      Reducer first(net->parameters(), names_of(*net), comm, tiny_buckets());
      first.set_comm_hook(std::make_unique<RecordingHook>(comm));
      for (int64_t s = 0; s < 3; ++s) step(first, *net, rank, s, 2);
      saved = first.state_dict();
      assignment = first.bucket_assignment();
    }
    EXPECT_EQ(saved.get_int("synchronized_iterations"), 3);
    EXPECT_EQ(saved.child("comm_hook").get_string("name"), "recording");

    // Per-rank hook state (residual = rank) gathered for a checkpoint on rank 0.
    const auto states = gather_state_dicts(comm, saved, 0);
    if (rank == 0) {
      ASSERT_EQ(states.size(), 2u);
      for (int64_t r = 0; r < 2; ++r) {
        const auto hook = states[static_cast<size_t>(r)].child("comm_hook").child("state");
        EXPECT_TRUE(torch::equal(hook.get_tensor("residual"), torch::full({2}, static_cast<double>(r)))) << "rank " << r;
      }
    }

    Reducer second(net->parameters(), names_of(*net), comm, tiny_buckets());
    auto hook = std::make_unique<RecordingHook>(comm);
    auto* recording = hook.get();
    second.set_comm_hook(std::move(hook));
    second.load_state_dict(saved);
    EXPECT_EQ(second.synchronized_iterations(), 3);
    EXPECT_TRUE(second.buckets_rebuilt());
    EXPECT_EQ(second.bucket_assignment(), assignment) << "rank " << rank;
    ASSERT_EQ(recording->layouts.size(), 1u) << "told the restored layout";
    EXPECT_EQ(recording->layouts[0].members, assignment);
    EXPECT_EQ(recording->runs_, 3 * static_cast<int64_t>(assignment.size()));
    EXPECT_TRUE(torch::equal(recording->residual_, torch::full({2}, static_cast<double>(rank))));

    // The next step: no second rebuild (no broadcast), iteration 3, the mean gradient.
    const auto before = comm.counters();
    auto loss = net->forward(batch(rank, 9, 0), false).pow(2).mean();
    const auto expected = mean_gradient(comm, loss, net->parameters());
    second.prepare_for_backward(loss);
    loss.backward();
    second.finalize_backward();
    EXPECT_EQ((comm.counters() - before)[CollectiveKind::Broadcast].calls, 0) << "rank " << rank;
    ASSERT_FALSE(recording->seen.empty());
    EXPECT_EQ(recording->seen.front().first, 3);
    std::vector<torch::Tensor> grads;
    for (const auto& p : net->parameters()) grads.push_back(p.grad().flatten());
    EXPECT_TRUE(torch::allclose(torch::cat(grads), expected, 1e-6, 1e-7)) << "rank " << rank;
    EXPECT_EQ(second.state_dict().get_int("synchronized_iterations"), 4);
  });
}

TEST(CommHookStateTest, StateSavedAfterOneIterationRebuildsOnTheNextLikeTheOriginal) {
  with_communicators(2, [](Communicator& comm) {
    auto net = make_net();
    StateDict saved;
    {
      Reducer first(net->parameters(), names_of(*net), comm, tiny_buckets());
      step(first, *net, comm.rank(), 0, 1);
      saved = first.state_dict();
    }
    EXPECT_TRUE(saved.get_bool("rebuild_due"));
    Reducer second(net->parameters(), names_of(*net), comm, tiny_buckets());
    second.load_state_dict(saved);
    EXPECT_FALSE(second.buckets_rebuilt());
    step(second, *net, comm.rank(), 1, 1);
    EXPECT_TRUE(second.buckets_rebuilt()) << "rank " << comm.rank();
  });
}

TEST(CommHookStateTest, StateOfAnotherModelOrAnotherHookIsACheckpointError) {
  with_communicators(2, [](Communicator& comm) {
    auto small = make_net(false);
    auto large = make_net(true);
    StateDict of_small, of_recording, with_empty_hook_state;
    {
      Reducer reducer(small->parameters(), names_of(*small), comm, tiny_buckets());
      with_empty_hook_state = reducer.state_dict();  // the default hook has no state
      reducer.set_comm_hook(std::make_unique<RecordingHook>(comm));
      of_recording = reducer.state_dict();
      of_small = with_empty_hook_state;
    }
    Reducer other_model(large->parameters(), names_of(*large), comm, tiny_buckets());
    try {
      other_model.load_state_dict(of_small);
      ADD_FAILURE() << "loaded state of another model";
    } catch (const CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find("expected reducer state for 8 parameters"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("got state saved for 4"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("belongs to another model"), std::string::npos) << e.what();
    }
    Reducer default_hook(small->parameters(), names_of(*small), comm, tiny_buckets());
    try {
      default_hook.load_state_dict(of_recording);
      ADD_FAILURE() << "loaded another hook's state";
    } catch (const CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find("expected state of comm hook 'allreduce', got state of 'recording'"),
                std::string::npos)
          << e.what();
    }
    // A hook without state in the checkpoint: the new hook starts fresh.
    Reducer recording(small->parameters(), names_of(*small), comm, tiny_buckets());
    recording.set_comm_hook(std::make_unique<RecordingHook>(comm));
    EXPECT_NO_THROW(recording.load_state_dict(with_empty_hook_state));
    auto damaged = of_small;
    damaged.set("buckets_rebuilt", true);
    damaged.set("bucket_order", std::vector<int64_t>{0, 0, 1, 2});
    EXPECT_THROW(recording.load_state_dict(damaged), CheckpointError);
  });
}

}  // namespace
}  // namespace volt::ddp
