// OSS on ranks as threads: with the same gradients on every rank it steps bitwise like the
// unsharded optimizer (SGD with momentum, Adam; 2 and 3 ranks) while each rank keeps only its
// shard's state; its consolidated state is PyTorch's layout of the unsharded optimizer and loads at
// another world size; clipping by norm over shards equals unsharded clipping; an inf in one rank's
// shard skips the step on every rank; broadcast_fp16 keeps the ranks identical; freezing a
// parameter repartitions without losing state; the parameters live in buffers laid out by owner,
// synchronized by one in-place all-gather that sends only what other ranks lack, one buffer per
// dtype; a parameter given new storage behind OSS's back is an error, not a silent desync.
#include <gtest/gtest.h>

#include <cmath>

#include "checkpoint/optimizer_state.h"
#include "core/error.h"
#include "precision/mixed_precision.h"
#include "strategies/sharded/oss.h"
#include "tests/distributed/thread_ranks.h"

namespace volt {
namespace {

using testing::with_communicators;

// A small model's parameters, the same on every call.
std::vector<torch::Tensor> make_params() {
  auto generator = at::detail::createCPUGenerator(7);
  std::vector<torch::Tensor> params;
  for (const auto& shape : std::vector<std::vector<int64_t>>{{16, 8}, {16}, {4, 16}, {4}, {3, 3}, {40}}) {
    params.push_back(torch::randn(shape, generator).requires_grad_(true));
  }
  return params;
}

// The gradients of step `step`, the same on every rank (what DDP leaves).
void set_grads(std::vector<torch::Tensor>& params, int64_t step) {
  auto generator = at::detail::createCPUGenerator(static_cast<uint64_t>(100 + step));
  for (auto& p : params) {
    if (p.requires_grad()) p.mutable_grad() = torch::randn(p.sizes(), generator);
  }
}

std::shared_ptr<torch::optim::Optimizer> make_optimizer(const std::string& kind, std::vector<torch::Tensor> params) {
  if (kind == "adam") return std::make_shared<torch::optim::Adam>(params, torch::optim::AdamOptions(0.01));
  return std::make_shared<torch::optim::SGD>(params, torch::optim::SGDOptions(0.1).momentum(0.9));
}

// The unsharded reference after `steps` steps.
std::vector<torch::Tensor> reference(const std::string& kind, int64_t steps) {
  auto params = make_params();
  auto optimizer = make_optimizer(kind, params);
  for (int64_t s = 0; s < steps; ++s) {
    set_grads(params, s);
    optimizer->step();
  }
  return params;
}

TEST(OSS, StepsBitwiseLikeTheUnshardedOptimizerWithOnlyItsShardsState) {
  for (const std::string kind : {"momentum", "adam"}) {
    for (const int64_t world : {2, 3}) {
      const auto expected = reference(kind, 3);
      with_communicators(world, [&](Communicator& comm) {
        auto params = make_params();
        auto oss = OSS::wrap(make_optimizer(kind, params), comm);
        for (int64_t s = 0; s < 3; ++s) {
          set_grads(params, s);
          oss->step();
        }
        for (size_t i = 0; i < params.size(); ++i) {
          EXPECT_TRUE(torch::equal(params[i], expected[i])) << kind << ", " << world << " ranks, rank " << comm.rank()
                                                            << ", parameter " << i;
        }
        size_t owned = 0;
        for (const auto& group : oss->partition().owned[static_cast<size_t>(comm.rank())]) owned += group.size();
        EXPECT_EQ(oss->local().state().size(), owned) << "rank " << comm.rank() << " keeps its shard's state only";
        EXPECT_LT(owned, params.size());
      });
    }
  }
}

TEST(OSS, ConsolidatedStateIsTheUnshardedLayoutAndLoadsAtAnotherWorldSize) {
  auto params = make_params();
  auto unsharded = make_optimizer("adam", params);
  for (int64_t s = 0; s < 2; ++s) {
    set_grads(params, s);
    unsharded->step();
  }
  const StateDict expected = optimizer_state_dict(*unsharded);
  StateDict consolidated;
  with_communicators(2, [&](Communicator& comm) {
    auto mine = make_params();
    auto oss = OSS::wrap(make_optimizer("adam", mine), comm);
    for (int64_t s = 0; s < 2; ++s) {
      set_grads(mine, s);
      oss->step();
    }
    auto state = oss->consolidated_state_dict(0);
    if (comm.rank() == 0) consolidated = state;
    if (comm.rank() != 0) {
      EXPECT_TRUE(state.empty());
    }
  });
  ASSERT_FALSE(consolidated.empty());
  const auto a = consolidated.at("state").toGenericDict(), b = expected.at("state").toGenericDict();
  ASSERT_EQ(a.size(), b.size());
  for (const auto& entry : b) {
    const auto mine = StateDict::from_ivalue(a.at(entry.key())), theirs = StateDict::from_ivalue(entry.value());
    for (const auto& key : theirs.keys()) {
      EXPECT_TRUE(torch::equal(mine.get_tensor(key), theirs.get_tensor(key))) << "parameter " << entry.key() << " " << key;
    }
  }
  EXPECT_EQ(StateDict::from_ivalue(consolidated.at("param_groups").toListRef()[0]).get_ints("params"),
            StateDict::from_ivalue(expected.at("param_groups").toListRef()[0]).get_ints("params"));

  // Three ranks take their shards out of it and step on exactly like the unsharded optimizer.
  const auto after = reference("adam", 3);
  with_communicators(3, [&](Communicator& comm) {
    auto mine = make_params();
    auto weights = reference("adam", 2);  // the weights the checkpoint's run reached
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < mine.size(); ++i) mine[i].copy_(weights[i]);
    auto oss = OSS::wrap(make_optimizer("adam", mine), comm);
    oss->load_sharded_or_consolidated_state_dict(consolidated, "test", {});
    set_grads(mine, 2);
    oss->step();
    for (size_t i = 0; i < mine.size(); ++i) {
      EXPECT_TRUE(torch::equal(mine[i], after[i])) << "rank " << comm.rank() << ", parameter " << i;
    }
  });
}

TEST(OSS, ClippingByNormOverShardsEqualsUnshardedClipping) {
  for (const double norm_type : {2.0, 1.0, static_cast<double>(INFINITY)}) {
    auto params = make_params();
    set_grads(params, 0);
    const double expected_norm = torch::nn::utils::clip_grad_norm_(params, 0.5, norm_type);
    with_communicators(2, [&](Communicator& comm) {
      auto mine = make_params();
      auto oss = OSS::wrap(make_optimizer("momentum", mine), comm);
      set_grads(mine, 0);
      const double norm = oss->clip_grad_norm(0.5, norm_type).item<double>();
      EXPECT_NEAR(norm, expected_norm, 1e-6 * expected_norm) << "norm type " << norm_type;
      for (size_t i = 0; i < mine.size(); ++i) {
        EXPECT_TRUE(torch::allclose(mine[i].grad(), params[i].grad(), 1e-6, 1e-8)) << "norm type " << norm_type << ", " << i;
      }
    });
  }
}

TEST(OSS, AnInfInOneRanksShardSkipsTheStepOnEveryRank) {
  const auto before = make_params();
  with_communicators(2, [&](Communicator& comm) {
    auto params = make_params();
    auto oss = OSS::wrap(make_optimizer("adam", params), comm);
    MixedPrecision precision(torch::kBFloat16, torch::kCPU, std::make_shared<GradScaler>());
    precision.set_found_inf_reducer([&](const torch::Tensor& found) {
      auto reduced = found.clone();
      comm.all_reduce(reduced, ReduceOp::Max);
      return reduced;
    });
    precision.backward((params[0] * 0).sum());  // creates the scale, as the first backward does
    set_grads(params, 0);
    // Rank 1 poisons one parameter it owns: only its shard's unscale sees the inf.
    for (size_t i = 0; i < params.size(); ++i) {
      if (oss->owner_of(params[i]) == 1 && comm.rank() == 1) params[i].mutable_grad()[0] = INFINITY;
    }
    for (size_t i = 0; i < params.size(); ++i) {
      if (oss->owner_of(params[i]) != comm.rank()) params[i].mutable_grad().reset();  // ShardedDDP's view
    }
    precision.unscale_gradients(*oss);
    EXPECT_FALSE(precision.optimizer_step(*oss)) << "rank " << comm.rank() << " stepped";
    precision.update();
    for (size_t i = 0; i < params.size(); ++i) EXPECT_TRUE(torch::equal(params[i], before[i])) << "rank " << comm.rank();
    EXPECT_LT(precision.metrics().at("amp_scale"), 65536.0) << "the scale backed off on rank " << comm.rank();
  });
}

TEST(OSS, BroadcastFp16KeepsEveryRankIdentical) {
  std::vector<std::vector<torch::Tensor>> results(2);
  with_communicators(2, [&](Communicator& comm) {
    auto params = make_params();
    OSSOptions options;
    options.broadcast_fp16 = true;
    auto oss = OSS::wrap(make_optimizer("adam", params), comm, options);
    set_grads(params, 0);
    oss->step();
    results[static_cast<size_t>(comm.rank())] = params;
  });
  const auto exact = reference("adam", 1);
  for (size_t i = 0; i < exact.size(); ++i) {
    EXPECT_TRUE(torch::equal(results[0][i], results[1][i])) << "parameter " << i;
    EXPECT_TRUE(torch::equal(results[0][i], exact[i].to(torch::kHalf).to(torch::kFloat))) << "float16-rounded " << i;
  }
}

TEST(OSS, FreezingAParameterRepartitionsAndKeepsTheOthersState) {
  // The unsharded reference: parameter 0 frozen after two steps (no gradient, no update).
  auto params = make_params();
  auto unsharded = make_optimizer("adam", params);
  for (int64_t s = 0; s < 4; ++s) {
    if (s == 2) params[0].requires_grad_(false);
    set_grads(params, s);
    if (s >= 2) params[0].mutable_grad().reset();
    unsharded->step();
  }
  with_communicators(2, [&](Communicator& comm) {
    auto mine = make_params();
    auto oss = OSS::wrap(make_optimizer("adam", mine), comm);
    const auto owner_before = oss->owner_of(mine[0]);
    for (int64_t s = 0; s < 4; ++s) {
      if (s == 2) mine[0].requires_grad_(false);
      set_grads(mine, s);
      if (s >= 2) mine[0].mutable_grad().reset();
      oss->step();
    }
    EXPECT_GE(owner_before, 0);
    EXPECT_EQ(oss->owner_of(mine[0]), -1) << "a frozen parameter has no owner after the repartition";
    for (size_t i = 0; i < mine.size(); ++i) {
      EXPECT_TRUE(torch::equal(mine[i], params[i])) << "rank " << comm.rank() << ", parameter " << i;
    }
  });
}

TEST(OSS, ParametersLiveInBuffersByOwnerAndOneAllGatherSendsWhatOthersLack) {
  // Note [Owner-ordered parameter buffers]. Two float32 parameters and a float64 one, so two buffers.
  for (const int64_t world : {2, 3}) {
    with_communicators(world, [&](Communicator& comm) {
      auto params = make_params();
      params.push_back(torch::arange(10, torch::kDouble).requires_grad_(true));
      std::vector<const void*> module_tensors;
      for (const auto& p : params) module_tensors.push_back(p.unsafeGetTensorImpl());
      auto adam = std::make_shared<torch::optim::Adam>(params, torch::optim::AdamOptions(0.01));
      auto oss = OSS::wrap(adam, comm);
      // Each dtype's parameters are views of one storage of exactly their size, rank 0's first.
      int64_t float_elements = 0, double_elements = 0;
      for (size_t i = 0; i < params.size(); ++i) {
        EXPECT_EQ(params[i].unsafeGetTensorImpl(), module_tensors[i]) << "the same tensors (set_data)";
        (params[i].scalar_type() == torch::kFloat ? float_elements : double_elements) += params[i].numel();
        for (size_t j = 0; j < params.size(); ++j) {
          if (params[j].scalar_type() != params[i].scalar_type()) continue;
          EXPECT_TRUE(params[i].is_alias_of(params[j])) << "parameters " << i << " and " << j << " share a buffer";
          if (oss->owner_of(params[i]) < oss->owner_of(params[j])) {
            EXPECT_LT(params[i].data_ptr(), params[j].data_ptr()) << "rank " << oss->owner_of(params[i]) << "'s first";
          }
        }
      }
      EXPECT_EQ(params[0].storage().nbytes(), static_cast<size_t>(float_elements * 4));
      EXPECT_EQ(params.back().storage().nbytes(), static_cast<size_t>(double_elements * 8));
      // What this rank sends: every chunk but its right neighbour's, once per buffer.
      std::vector<int64_t> float_counts(static_cast<size_t>(world), 0), double_counts(static_cast<size_t>(world), 0);
      for (const auto& p : params) {
        (p.scalar_type() == torch::kFloat ? float_counts : double_counts)[static_cast<size_t>(oss->owner_of(p))] += p.numel();
      }
      const auto right = static_cast<size_t>((comm.rank() + 1) % world);
      for (auto& p : params) p.mutable_grad() = torch::ones_like(p);
      comm.reset_counters();
      oss->step();
      const auto gathered = comm.counters()[CollectiveKind::AllGather];
      EXPECT_EQ(gathered.calls, 2) << "one all-gather per buffer";
      EXPECT_EQ(gathered.sent_bytes, (float_elements - float_counts[right]) * 4 + (double_elements - double_counts[right]) * 8)
          << "rank " << comm.rank();
      EXPECT_EQ(comm.counters()[CollectiveKind::Broadcast].calls, 0);
      // Every rank ends with the same values as one unsharded Adam step.
      auto reference_params = make_params();
      reference_params.push_back(torch::arange(10, torch::kDouble).requires_grad_(true));
      torch::optim::Adam reference_adam(reference_params, torch::optim::AdamOptions(0.01));
      for (auto& p : reference_params) p.mutable_grad() = torch::ones_like(p);
      reference_adam.step();
      for (size_t i = 0; i < params.size(); ++i) {
        EXPECT_TRUE(torch::equal(params[i], reference_params[i])) << "rank " << comm.rank() << " parameter " << i;
      }
    });
  }
}

TEST(OSS, AParameterGivenNewStorageBehindItsBackIsAnErrorNotADesync) {
  with_communicators(2, [&](Communicator& comm) {
    auto params = make_params();
    auto oss = OSS::wrap(make_optimizer("momentum", params), comm);
    {
      torch::NoGradGuard no_grad;
      params[2].set_data(params[2].detach().clone());  // what module->to(...) would do
    }
    set_grads(params, 0);
    try {
      oss->step();
      ADD_FAILURE() << "no error on rank " << comm.rank();
    } catch (const InternalError& e) {
      EXPECT_NE(std::string(e.what()).find("was given new storage after OSS laid it out"), std::string::npos)
          << e.what();
    }
  });
}

}  // namespace
}  // namespace volt
