// Note [Fault-tolerant replicas]: whole replica groups of the worker's train mode, each launched on
// its own (volt's launcher, or torchrun with restarts), meeting through volt-lighthouse:
//   - two replicas that never fail train like ddp on as many processes (the same samples per step);
//   - a replica that starts late heals from the other, ddp and fsdp inside it, and from then on
//     equals it bit for bit at every step;
//   - four replicas under torchrun, one of them killed with SIGKILL every 6 steps: the others
//     commit at least 80% of their steps, every step's parameters are the same bits wherever it was
//     committed, each restarted replica heals and ends equal to the others, and the final loss is
//     that of a run without failures within noise.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <set>

#include "distributed/network.h"
#include "tests/distributed/worker_runs.h"

namespace volt::testing {
namespace {

struct Replica {
  std::string launch;  // the command, before the worker's own (e.g. torchrun ...), or ""
  std::string flags;   // the worker's flags
  // Starts once the first replica's output holds this text (""): at once).
  std::string after;
};

struct ReplicaRuns {
  int exit_code = 0;                 // the script's: 0 when every replica exited 0
  std::vector<std::string> outputs;  // each replica's output (every attempt)
  std::string lighthouse;            // the lighthouse's output
};

// The lighthouse and `replicas`, each the worker's train mode with --fault-tolerance, run at once
// from one shell script; waits for every replica, then stops the lighthouse.
ReplicaRuns run_replicas(const std::vector<Replica>& replicas, const std::string& lighthouse_flags, int timeout) {
  TemporaryDirectory dir;
  const int64_t port = find_free_port();
  const std::string ft =
      "--fault-tolerance replicas=" + std::to_string(replicas.size()) + ",lighthouse=127.0.0.1:" + std::to_string(port);
  std::string script = "cd " + dir.path() + "; " + built_binary("bin/volt-lighthouse") + " --replicas " +
                       std::to_string(replicas.size()) + " --port " + std::to_string(port) + " " + lighthouse_flags +
                       " > lighthouse.out 2>&1 & lh=$!; pids=; ";
  for (size_t r = 0; r < replicas.size(); ++r) {
    const std::string root = dir.path() + "/replica" + std::to_string(r);
    std::string wait_for;
    if (!replicas[r].after.empty()) {
      // At most a minute: a first replica that failed never prints it.
      wait_for = "for i in $(seq 1200); do grep -q -- '" + replicas[r].after +
                 "' replica0.out 2>/dev/null && break; sleep 0.05; done; ";
    }
    std::string command = train_command(root, replicas[r].flags + " " + ft + ",replica=" + std::to_string(r));
    // The flags' own --max-epochs replaces train_command's.
    if (replicas[r].flags.find("--max-epochs") != std::string::npos) command.erase(command.find("--max-epochs 2"), 14);
    script += "( " + wait_for + replicas[r].launch + " " + command + " ) > replica" + std::to_string(r) +
              ".out 2>&1 & pids=\"$pids $!\"; ";
  }
  script += "status=0; for p in $pids; do wait $p || status=1; done; kill $lh; wait $lh; exit $status";
  std::ofstream(dir.path() + "/run.sh") << script << "\n";
  const auto result = run_command("bash " + dir.path() + "/run.sh", timeout);
  ReplicaRuns runs{.exit_code = result.exit_code, .lighthouse = file_text(dir.path() + "/lighthouse.out")};
  for (size_t r = 0; r < replicas.size(); ++r) {
    runs.outputs.push_back(file_text(dir.path() + "/replica" + std::to_string(r) + ".out"));
  }
  if (result.exit_code != 0) ADD_FAILURE() << "script output:\n" << result.output;
  return runs;
}

std::string all_of(const ReplicaRuns& runs) {
  std::string text = "lighthouse:\n" + runs.lighthouse;
  for (size_t r = 0; r < runs.outputs.size(); ++r) text += "\nreplica " + std::to_string(r) + ":\n" + runs.outputs[r];
  return text;
}

// step → the parameters' text, from every STEP line of rank `rank` in `output`.
std::multimap<int64_t, std::string> step_texts(const std::string& output, int64_t rank = 0) {
  static const std::regex pattern("STEP rank=(\\d+) step=(\\d+) params=(\\S+)");
  std::multimap<int64_t, std::string> out;
  for (std::sregex_iterator it(output.begin(), output.end(), pattern), end; it != end; ++it) {
    if (std::stoll((*it)[1]) == rank) out.emplace(std::stoll((*it)[2]), (*it)[3]);
  }
  return out;
}

struct Summary {
  int64_t committed = -1, taken = -1, heals = -1;
};
// The replica's last "volt: fault tolerance: replica R committed X of the Y steps ..." line.
Summary summary_of(const std::string& output) {
  static const std::regex pattern("replica \\d+ committed (\\d+) of the (\\d+) steps it took part in, healed (\\d+)");
  Summary out;
  for (std::sregex_iterator it(output.begin(), output.end(), pattern), end; it != end; ++it) {
    out = {std::stoll((*it)[1]), std::stoll((*it)[2]), std::stoll((*it)[3])};
  }
  return out;
}

TEST(FaultTolerantReplicas, TwoReplicasWithoutFailuresTrainLikeDDPOnTwoProcesses) {
  // Each replica one process at batch 8: a step trains replica batches 2s and 2s+1, the 16
  // samples ddp's two ranks take at step s (its ranks interleave them; the mean is the same).
  const std::string flags = "--batch-size 8 --optimizer adam --print-steps";
  const auto runs = run_replicas({{"", flags, ""}, {"", flags, ""}}, "--min-replicas 2", 240);
  ASSERT_EQ(runs.exit_code, 0) << all_of(runs);
  TemporaryDirectory dir;
  const auto ddp = run_command(train_command(dir.path(), flags + " --devices 2 --strategy ddp"), 180);
  ASSERT_EQ(ddp.exit_code, 0) << ddp.output;
  const auto expected = step_lines(ddp.output);
  ASSERT_EQ(expected.at(0).size(), 8u) << "2 epochs of 4 steps";
  for (size_t r = 0; r < 2; ++r) {
    const auto got = step_lines(runs.outputs[r]);
    expect_steps_close({{0, got.at(0)}}, {{0, expected.at(0)}}, 1e-6, "replica " + std::to_string(r) + " vs ddp");
  }
  EXPECT_EQ(step_texts(runs.outputs[0]), step_texts(runs.outputs[1])) << "the replicas are the same bits";
  const auto summary = summary_of(runs.outputs[1]);
  EXPECT_EQ(summary.committed, 8) << runs.outputs[1];
  EXPECT_EQ(summary.taken, 8);
  EXPECT_EQ(summary.heals, 1) << "the first quorum's members take the lowest replica's state";
}

class ReplicaStrategies : public ::testing::TestWithParam<std::string> {};

TEST_P(ReplicaStrategies, AReplicaThatStartsLateHealsAndEqualsItsPeerAtEveryStep) {
  // Replica 0 trains alone (min_replicas 1) until step 4; replica 1 then starts, heals from it
  // over the network (each rank its shard under a sharded layout) and joins the quorum.
  const std::string flags =
      "--batch-size 4 --devices 2 --optimizer adam --print-steps --max-epochs 3 --slow-rank 0 "
      "--slow-ms 150 --strategy " +
      GetParam();
  const auto runs = run_replicas({{"", flags, ""}, {"", flags, "step=4 "}}, "--min-replicas 1", 300);
  ASSERT_EQ(runs.exit_code, 0) << all_of(runs);
  const auto first = step_texts(runs.outputs[0]);
  const auto late = step_texts(runs.outputs[1]);
  ASSERT_FALSE(late.empty()) << all_of(runs);
  EXPECT_GT(late.begin()->first, 4) << "it joined after step 4";
  for (int64_t rank = 0; rank < 2; ++rank) {
    for (const auto& [step, params] : step_texts(runs.outputs[1], rank)) {
      const auto there = first.find(step);
      ASSERT_NE(there, first.end()) << "step " << step;
      EXPECT_EQ(params, there->second) << GetParam() << ": rank " << rank << " of the late replica, step " << step;
    }
  }
  const auto summary = summary_of(runs.outputs[1]);
  EXPECT_EQ(summary.heals, 1) << runs.outputs[1];
  EXPECT_EQ(summary.committed, summary.taken) << "no step failed: " << runs.outputs[1];
  const auto lines = trained_lines(runs.outputs[1]);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0].params, trained_lines(runs.outputs[0])[0].params) << "both end the same";
}

INSTANTIATE_TEST_SUITE_P(InsideAReplica, ReplicaStrategies, ::testing::Values("ddp", "fsdp:state_dict_type=sharded"),
                         [](const auto& info) { return info.param == "ddp" ? "DDP" : "ShardedFSDP"; });

// The mean squared error over the worker's 64 training samples (regression_dataset(64, 8, 7)) of
// the linear model whose weight and bias `params` lists.
double training_loss(const std::vector<double>& params) {
  auto generator = at::detail::createCPUGenerator(7);
  const auto x = torch::randn({64, 8}, generator);
  const auto w = torch::randn({8, 1}, generator);
  const auto y = x.matmul(w) + 0.1 * torch::randn({64, 1}, generator);
  const auto p = torch::tensor(params, torch::kDouble).to(torch::kFloat);
  return (x.matmul(p.narrow(0, 0, 8).view({8, 1})) + p[8] - y).pow(2).mean().item<double>();
}

TEST(FaultTolerantReplicas, KillNineEverySixStepsUnderTorchrunCommitsEightyPercentAndHealsBitForBit) {
  // Four replicas of one process, each under torchrun with restarts; replicas 1, 2 and 3 in turn
  // SIGKILL themselves at steps 6, 12, ..., 42 (one kill every 6 steps); 8 epochs (64 steps of
  // 300 ms without a failure: 32 replica batches of 2 samples an epoch, 4 a step).
  const auto launch = [] {
    return torchrun() +
           " --no_python --nproc_per_node 1 --max_restarts 4 --monitor_interval 0.2 --redirects 1 "
           "--tee 1 --master_port " +
           std::to_string(find_free_port());
  };
  const std::string flags =
      "--batch-size 2 --optimizer adam --print-steps --max-epochs 8 --slow-rank 0 --slow-ms 300";
  const auto runs = run_replicas({{launch(), flags, ""},
                                  {launch(), flags + " --kill-at-steps 6,24,42", ""},
                                  {launch(), flags + " --kill-at-steps 12,30", ""},
                                  {launch(), flags + " --kill-at-steps 18,36", ""}},
                                 "--heartbeat-timeout 1", 420);
  ASSERT_EQ(runs.exit_code, 0) << all_of(runs);
  // Every committed step is the same bits wherever it was committed.
  std::map<int64_t, std::set<std::string>> committed;
  for (const auto& output : runs.outputs) {
    for (const auto& [step, params] : step_texts(output)) committed[step].insert(params);
  }
  ASSERT_GE(committed.size(), 64u) << all_of(runs);
  EXPECT_EQ(committed.rbegin()->first, static_cast<int64_t>(committed.size())) << "steps 1, 2, ... each committed";
  for (const auto& [step, versions] : committed) EXPECT_EQ(versions.size(), 1u) << "step " << step;
  // Replica 0, never killed, committed at least 80% of the steps it took part in.
  const auto survivor = summary_of(runs.outputs[0]);
  ASSERT_GT(survivor.taken, 0) << runs.outputs[0];
  const double kept = static_cast<double>(survivor.committed) / static_cast<double>(survivor.taken);
  EXPECT_GE(kept, 0.8) << survivor.committed << " of " << survivor.taken;
  std::cout << "replica 0 committed " << survivor.committed << " of " << survivor.taken << " steps\n";
  // Each killed replica was restarted (its kills), healed, and ends with replica 0's parameters.
  const auto final_params = trained_lines(runs.outputs[0]).at(0).params;
  for (size_t r = 1; r < 4; ++r) {
    const auto& output = runs.outputs[r];
    EXPECT_NE(output.find("KILLING rank=0 attempt=0"), std::string::npos) << output;
    EXPECT_GE(summary_of(output).heals, 1) << output;
    const auto lines = trained_lines(output);
    ASSERT_FALSE(lines.empty()) << output;
    EXPECT_EQ(lines.back().params, final_params) << "replica " << r;
  }
  // The same 8 epochs without a failure: the same samples, each trained once, only grouped into
  // steps otherwise (a step without one replica averages 3 replica batches): the final loss within
  // 5% of it.
  const std::string calm_flags = "--batch-size 2 --optimizer adam --print-steps --max-epochs 8";
  const auto calm =
      run_replicas({{"", calm_flags, ""}, {"", calm_flags, ""}, {"", calm_flags, ""}, {"", calm_flags, ""}},
                   "--min-replicas 4", 240);
  ASSERT_EQ(calm.exit_code, 0) << all_of(calm);
  const double loss = training_loss(final_params);
  const double calm_loss = training_loss(trained_lines(calm.outputs[0]).at(0).params);
  std::cout << "final training loss " << loss << " with failures, " << calm_loss << " without\n";
  EXPECT_LE(std::abs(loss - calm_loss), 0.05 * calm_loss) << loss << " vs " << calm_loss;
}

}  // namespace
}  // namespace volt::testing
