// Post-local-SGD against PyTorch's own: the reference PyTorch (testing::reference_python: 1.13 or
// 2.11, the version of this build's LibTorch) runs DistributedDataParallel with
// post_localSGD_hook and a PeriodicModelAverager (or HierarchicalModelAverager) on 4 processes over
// Gloo (tests/ddp/python/post_local_sgd_reference.py); volt runs its Reducer with the post_local_sgd
// hook and the averager it comes with on 4 ranks as threads, as DDPStrategy composes them. Same
// model, initial weights, batches, SGD with momentum; every rank's parameters after every one of 20
// steps must agree within 1e-5 relative, with subgroups of 1 and 2 processes, the periodic and the
// hierarchical averager, and without post_local_gradient_allreduce. (PyTorch 1.13 creates subgroups
// only with CUDA; the reference replaces dist.new_subgroups by the same body without that check.)
#include <gtest/gtest.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include <fstream>
#include <iostream>

#include "checkpoint/checkpoint_io.h"
#include "checkpoint/module_state.h"
#include "distributed/network.h"
#include "strategies/ddp/comm_hook_registry.h"
#include "strategies/ddp/reducer.h"
#include "tests/ddp/reducer_harness.h"
#include "tests/distributed/thread_ranks.h"
#include "tests/support/test_support.h"

namespace volt::ddp::local_sgd_parity_tests {
namespace {

constexpr int64_t kRanks = 4, kSteps = 20, kStart = 5, kBatch = 6;

struct Case {
  int64_t subgroup_size;
  std::string periods;  // "3" (periodic) or "2:2,4:4" (hierarchical)
  bool post_local_gradient_allreduce = true;
};

std::string hook_spec(const Case& c) {
  const bool hierarchical = c.periods.find(':') != std::string::npos;
  return "post_local_sgd:start_local_sgd_iter=" + std::to_string(kStart) + ",subgroup_size=" +
         std::to_string(c.subgroup_size) + (hierarchical ? ",model_averaging_periods=" : ",model_averaging_period=") +
         c.periods + (c.post_local_gradient_allreduce ? "" : ",post_local_gradient_allreduce=false");
}

struct Problem {
  StateDict weights;
  torch::Tensor inputs, targets;  // [ranks, steps, batch, features]
};

Problem make_problem() {
  Problem problem;
  auto net = harness::make_net();
  problem.weights = module_state_dict(*net);
  auto generator = at::detail::createCPUGenerator(77);
  problem.inputs = torch::randn({kRanks, kSteps, kBatch, 8}, generator);
  problem.targets = torch::randn({kRanks, kSteps, kBatch, 4}, generator);
  return problem;
}

// Every rank's flat parameters after every step ([ranks][steps, parameters]), from volt.
std::vector<torch::Tensor> train_volt(const Problem& problem, const Case& c) {
  std::vector<std::shared_ptr<harness::Net>> nets;
  for (int64_t r = 0; r < kRanks; ++r) nets.push_back(harness::make_net());
  std::vector<torch::Tensor> history(kRanks);
  const auto errors = testing::run_thread_ranks(kRanks, [&](int64_t rank, int64_t port) {
    auto world = Communicator::connect(testing::loopback_options(rank, kRanks, port));
    const std::string spec = hook_spec(c);
    const auto hook = comm_hook_registry().create("post_local_sgd", comm_hook_registry().parse(spec));
    const auto* on_topology = hook->on_topology();
    auto topology = Topology::build(world, {.global_rank = rank, .world_size = kRanks, .local_rank = rank,
                                            .local_world_size = kRanks}, on_topology->node_size);
    auto& net = *nets[static_cast<size_t>(rank)];
    Reducer reducer(net.parameters(), harness::names_of(net), *world, ReducerOptions{});
    reducer.set_comm_hook(hook->make(*world, topology.get()));
    auto averager = on_topology->make_averager(*topology);
    torch::optim::SGD optimizer(net.parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
    std::vector<torch::Tensor> rows;
    for (int64_t step = 0; step < kSteps; ++step) {
      optimizer.zero_grad();
      auto loss = (net.forward(problem.inputs[rank][step], false) - problem.targets[rank][step]).pow(2).mean();
      reducer.prepare_for_backward(loss);
      loss.backward();
      reducer.finalize_backward();
      optimizer.step();
      averager->average_parameters(net.parameters());
      std::vector<torch::Tensor> flat;
      for (const auto& p : net.parameters()) flat.push_back(p.detach().reshape(-1));
      rows.push_back(torch::cat(flat));
    }
    history[static_cast<size_t>(rank)] = torch::stack(rows);
  });
  for (size_t r = 0; r < errors.size(); ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
  return history;
}

std::vector<torch::Tensor> train_pytorch(const Problem& problem, const Case& c, const testing::TemporaryDirectory& dir) {
  StateDict input;
  input.set("weights", problem.weights);
  input.set("inputs", problem.inputs);
  input.set("targets", problem.targets);
  const auto bytes = torch::pickle_save(input.to_ivalue());
  std::ofstream(dir.file("input.pt"), std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  const std::string script = std::string(VOLT_SOURCE_DIR) + "/tests/ddp/python/post_local_sgd_reference.py";
  const std::string port = std::to_string(find_free_port());
  std::string command = "pids=''; for r in 0 1 2 3; do OMP_NUM_THREADS=1 " + testing::reference_python() + " " + script + " $r " +
                        std::to_string(kRanks) + " " + port + " " + dir.file("input.pt") + " " + dir.file("out_") +
                        "$r.pt " + std::to_string(c.subgroup_size) + " " + std::to_string(kStart) + " '" + c.periods +
                        "' " + (c.post_local_gradient_allreduce ? "1" : "0") + " & pids=\"$pids $!\"; done; status=0; for p in $pids; do wait $p || status=1; done; "
                        "exit $status";
  const auto result = testing::run_command(command + " 2>&1", 300);
  EXPECT_EQ(result.exit_code, 0) << result.output;
  std::vector<torch::Tensor> history;
  for (int64_t r = 0; r < kRanks; ++r) {
    history.push_back(read_checkpoint_file(dir.file("out_" + std::to_string(r) + ".pt"), false).get_tensor("params"));
  }
  return history;
}

void PrintTo(const Case& c, std::ostream* out) { *out << hook_spec(c); }

class PostLocalSGDParity : public ::testing::TestWithParam<Case> {};

TEST_P(PostLocalSGDParity, EveryRankMatchesPyTorchAfterEveryStep) {
  const Case c = GetParam();
  testing::TemporaryDirectory dir;
  const auto problem = make_problem();
  const auto theirs = train_pytorch(problem, c, dir);
  ASSERT_FALSE(::testing::Test::HasFailure());
  const auto mine = train_volt(problem, c);
  double worst = 0;
  for (int64_t r = 0; r < kRanks; ++r) {
    const auto& a = mine[static_cast<size_t>(r)];
    const auto& b = theirs[static_cast<size_t>(r)];
    ASSERT_EQ(a.sizes(), b.sizes()) << "rank " << r;
    for (int64_t step = 0; step < kSteps; ++step) {
      // Relative to the parameters' scale (elementwise ratios blow up near zero).
      const double relative = (a[step] - b[step]).abs().max().item<double>() / b[step].abs().max().item<double>();
      worst = std::max(worst, relative);
      EXPECT_LE(relative, 1e-5) << "rank " << r << ", step " << step << ", " << hook_spec(c);
    }
  }
  // The test means something only if the ranks' models really differed at the end.
  EXPECT_FALSE(torch::equal(theirs[0][kSteps - 1], theirs[kRanks - 1][kSteps - 1])) << "PyTorch's ranks agree";
  std::cout << "post-local-SGD parity " << hook_spec(c) << ": max relative difference " << worst << "\n";
}

INSTANTIATE_TEST_SUITE_P(SubgroupsAndAveragers, PostLocalSGDParity,
                         ::testing::Values(Case{1, "3"}, Case{2, "3"}, Case{2, "3", false}, Case{1, "2:2,4:4"},
                                           Case{2, "2:2,4:4"}, Case{1, "1:1,2:2,4:4"}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           std::string name = "subgroup" + std::to_string(info.param.subgroup_size) + "_periods_" +
                                              info.param.periods +
                                              (info.param.post_local_gradient_allreduce ? "" : "_no_allreduce");
                           for (char& ch : name) {
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace volt::ddp::local_sgd_parity_tests
