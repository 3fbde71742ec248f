// Ranks as processes, end to end: volt's launcher (success, a child that exits, is killed, stalls,
// a parent that throws, SIGTERM forwarding), torchrun, mpirun, two "nodes" over loopback and over
// a veth pair between network namespaces. Every run goes through build/tests/distributed_worker.
#include <gtest/gtest.h>

#include <signal.h>

#include <chrono>
#include <fstream>
#include <regex>
#include <set>
#include <thread>

#include "tests/support/test_support.h"
#include "distributed/network.h"

namespace volt {
namespace {

using testing::ProcessResult;
using testing::run_command;
using testing::torchrun;

std::string worker() { return testing::built_binary("tests/distributed_worker"); }

struct WorkerLine {
  int64_t rank, world, local, local_world, node, nodes, pid;
  std::string env;
  double sum;
};

// The "WORKER rank=.. " lines of a run (torchrun's --tee prefixes them; the regex skips that).
std::vector<WorkerLine> worker_lines(const std::string& output) {
  static const std::regex pattern(
      "WORKER rank=(\\d+) world=(\\d+) local=(\\d+)/(\\d+) node=(\\d+)/(\\d+) env=(\\w+) sum=([0-9.]+) pid=(\\d+)");
  std::vector<WorkerLine> lines;
  for (std::sregex_iterator it(output.begin(), output.end(), pattern), end; it != end; ++it) {
    const auto& m = *it;
    lines.push_back({std::stoll(m[1]), std::stoll(m[2]), std::stoll(m[3]), std::stoll(m[4]), std::stoll(m[5]),
                     std::stoll(m[6]), std::stoll(m[9]), m[7], std::stod(m[8])});
  }
  return lines;
}

// Whether `pid` is a live process: a zombie (dead, not yet reaped by whoever adopted it) is not.
bool process_exists(int64_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!std::getline(stat, text)) return false;
  const auto state = text.find(") ");  // "pid (comm) S ...": the state follows the command name
  return state != std::string::npos && state + 2 < text.size() && text[state + 2] != 'Z' && text[state + 2] != 'X';
}

// Waits up to `limit` for every pid to end; returns those still alive then.
std::vector<int64_t> alive_after(const std::vector<int64_t>& pids, std::chrono::seconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  std::vector<int64_t> alive;
  do {
    alive.clear();
    for (const auto pid : pids) {
      if (process_exists(pid)) alive.push_back(pid);
    }
    if (alive.empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  } while (std::chrono::steady_clock::now() < deadline);
  return alive;
}

// A launcher run in the background whose parent, once all `ranks` printed their WORKER line
// (rank 1 stalls, the others wait for it in a collective), gets `kill -SIGNAL`; prints the
// parent's exit status as "parent_status=N", then the run's output.
std::string signalled_run(const testing::TemporaryDirectory& dir, int64_t ranks, const std::string& signal) {
  const std::string out = dir.file("out");
  return worker() + " --mode fail --fail-rank 1 --how stall --report-signals --devices " + std::to_string(ranks) +
         " --timeout 300 > " + out + " 2>&1 & parent=$!; for i in $(seq 1200); do [ \"$(grep -c '^WORKER rank' " +
         out + ")\" = " + std::to_string(ranks) + " ] && break; sleep 0.1; done; sleep 0.5; kill -" + signal +
         " $parent; wait $parent; echo parent_status=$?; cat " + out;
}

// Every rank 0..world-1 reported once, with the closed-form sum, from the given environment.
void expect_complete_group(const ProcessResult& result, int64_t world, const std::string& env,
                           int64_t local_world, int64_t nodes) {
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const auto lines = worker_lines(result.output);
  ASSERT_EQ(static_cast<int64_t>(lines.size()), world) << result.output;
  std::set<int64_t> ranks;
  for (const auto& line : lines) {
    ranks.insert(line.rank);
    EXPECT_EQ(line.world, world);
    EXPECT_EQ(line.env, env);
    EXPECT_EQ(line.local_world, local_world);
    EXPECT_EQ(line.nodes, nodes);
    EXPECT_EQ(line.node, line.rank / local_world);
    EXPECT_EQ(line.local, line.rank % local_world);
    EXPECT_EQ(line.sum, static_cast<double>(world * (world + 1) / 2));
    EXPECT_FALSE(process_exists(line.pid)) << "rank " << line.rank << " (pid " << line.pid << ") outlived the run";
  }
  EXPECT_EQ(static_cast<int64_t>(ranks.size()), world);
}

double seconds(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

TEST(LauncherTest, StartsOneProcessPerDevice) {
  const auto result = run_command(worker() + " --mode collectives --devices 3 --timeout 60", 120);
  expect_complete_group(result, 3, "volt", 3, 1);
}

TEST(LauncherTest, ChildThatExitsIsNamedAndTheOthersStop) {
  const auto start = std::chrono::steady_clock::now();
  const auto result = run_command(worker() + " --mode fail --fail-rank 2 --how exit --devices 3 --timeout 300", 280);
  // Seconds on an idle machine; the bound only has to stay far from the 300 s timeout.
  EXPECT_LT(seconds(start), 120.0) << "a dead peer must end the run in seconds, not at the 300 s timeout";
  EXPECT_NE(result.exit_code, 0) << result.output;
  EXPECT_TRUE(std::regex_search(result.output, std::regex("rank 2 \\(local rank 2, pid \\d+\\) exited with status 3")))
      << result.output;
  for (const auto& line : worker_lines(result.output)) EXPECT_FALSE(process_exists(line.pid)) << line.rank;
}

// A rank that leaves early (returns from main with status 0, closing its communicator) while the
// others still reduce: they fail in seconds, naming it, and the run ends non-zero.
TEST(LauncherTest, ChildThatLeavesEarlyFailsTheOthersNamingIt) {
  const auto start = std::chrono::steady_clock::now();
  const auto result = run_command(worker() + " --mode fail --fail-rank 2 --how leave --devices 3 --timeout 300", 280);
  EXPECT_LT(seconds(start), 60.0) << "a peer that left must end the run in seconds, not at the 300 s timeout";
  EXPECT_NE(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("rank 2 left the group (its communicator was closed)"), std::string::npos)
      << result.output;
  for (const auto& line : worker_lines(result.output)) EXPECT_FALSE(process_exists(line.pid)) << line.rank;
}

// Errors of several ranks: one line each, prefixed by the rank; the rank that failed first is the
// cause that the others' lines start with.
TEST(LauncherTest, EachRanksErrorIsOneLineAndTheFirstCauseComesFirst) {
  const auto result = run_command(worker() + " --mode train --devices 2 --max-epochs 2 --batch-size 8 --timeout 60" +
                                      " --enable-progress-bar false --enable-model-summary false --enable-checkpointing false" +
                                      " --crash-rank 1 --crash-epoch 0 2>&1",
                                  120);
  EXPECT_NE(result.exit_code, 0) << result.output;
  const std::string cause = "worker: deliberate crash at the start of epoch 0";
  EXPECT_NE(result.output.find("[rank 1] error: " + cause + "\n"), std::string::npos) << result.output;
  const auto zero = result.output.find("[rank 0] error: ");
  ASSERT_NE(zero, std::string::npos) << result.output;
  EXPECT_EQ(result.output.find("Rank 1 failed first: ", zero), zero + std::string("[rank 0] error: ").size())
      << "rank 0's line starts with the cause: " << result.output;
}

TEST(LauncherTest, ChildKilledBySignalIsNamed) {
  const auto result = run_command(worker() + " --mode fail --fail-rank 1 --how kill --devices 2 --timeout 60", 120);
  EXPECT_NE(result.exit_code, 0) << result.output;
  EXPECT_TRUE(std::regex_search(result.output, std::regex("rank 1 \\(local rank 1, pid \\d+\\) was killed by signal 9")))
      << result.output;
}

TEST(LauncherTest, ParentThatThrowsStopsItsChildren) {
  const auto result = run_command(worker() + " --mode fail --fail-rank 0 --how throw --devices 3 --timeout 60", 120);
  EXPECT_EQ(result.exit_code, 1) << result.output;
  EXPECT_NE(result.output.find("deliberate failure"), std::string::npos) << result.output;
  const auto lines = worker_lines(result.output);
  EXPECT_EQ(lines.size(), 3u) << result.output;
  for (const auto& line : lines) EXPECT_FALSE(process_exists(line.pid)) << line.rank;
}

TEST(LauncherTest, StalledChildEndsTheRunAtTheTimeout) {
  const auto start = std::chrono::steady_clock::now();
  const auto result = run_command(worker() + " --mode fail --fail-rank 1 --how stall --devices 2 --timeout 3", 280);
  const double took = seconds(start);
  EXPECT_NE(result.exit_code, 0) << result.output;
  EXPECT_GE(took, 3.0);
  // The 3 s timeout ends it (plus start-up, diagnosis and the launcher's stop), long before the
  // stalled rank's 600 s sleep would: a bound far from both.
  EXPECT_LT(took, 200.0) << result.output;
  EXPECT_NE(result.output.find("3000 ms"), std::string::npos) << result.output;
  for (const auto& line : worker_lines(result.output)) EXPECT_FALSE(process_exists(line.pid)) << line.rank;
}

// `signal` (named `name` for kill(1)) to the parent of `ranks` processes: every launched rank
// reports that it reached it (--report-signals), rather than the launcher's SIGKILL after the
// grace period; the parent ends by it (exit status 128 + signal); nothing outlives the parent.
void expect_signal_forwarded(int64_t ranks, const std::string& name, int signal) {
  testing::TemporaryDirectory dir;
  const auto result = run_command(signalled_run(dir, ranks, name), 240);
  EXPECT_NE(result.output.find("parent_status=" + std::to_string(128 + signal)), std::string::npos) << result.output;
  const auto lines = worker_lines(result.output);
  ASSERT_EQ(static_cast<int64_t>(lines.size()), ranks) << result.output;
  for (int64_t rank = 1; rank < ranks; ++rank) {
    EXPECT_NE(result.output.find("SIGNAL rank=" + std::to_string(rank) + " signal=" + std::to_string(signal)),
              std::string::npos)
        << "SIG" << name << " did not reach rank " << rank << ":\n" << result.output;
  }
  for (const auto& line : lines) EXPECT_FALSE(process_exists(line.pid)) << "rank " << line.rank << " survived";
}

TEST(LauncherTest, SigtermIsForwardedAndNothingOutlivesTheParent) { expect_signal_forwarded(2, "TERM", SIGTERM); }

// Issue 21.6: Ctrl-C reaches every rank, the one stalled outside collectives and the one waiting
// inside one.
TEST(LauncherTest, SigintIsForwardedToEveryChild) { expect_signal_forwarded(3, "INT", SIGINT); }

// Issue 21.6: a launcher killed outright (SIGKILL: no handler runs, nothing is forwarded) takes
// its children with it (PR_SET_PDEATHSIG). Bounded: they must be gone within 30 s.
TEST(LauncherTest, ChildrenDieWithALauncherKilledOutright) {
  testing::TemporaryDirectory dir;
  const auto result = run_command(signalled_run(dir, 3, "KILL"), 240);
  EXPECT_NE(result.output.find("parent_status=137"), std::string::npos) << result.output;  // 128 + SIGKILL
  const auto lines = worker_lines(result.output);
  ASSERT_EQ(lines.size(), 3u) << result.output;
  std::vector<int64_t> children;
  for (const auto& line : lines) {
    if (line.rank != 0) children.push_back(line.pid);
  }
  EXPECT_EQ(alive_after(children, std::chrono::seconds(30)), std::vector<int64_t>{})
      << "children outlived their launcher:\n" << result.output;
}

TEST(LauncherTest, TwoNodesOnOneMachine) {
  const int64_t port = find_free_port();
  const std::string common = " --mode collectives --devices 2 --num-nodes 2 --master-addr 127.0.0.1 --master-port " +
                             std::to_string(port) + " --timeout 60";
  const auto result = run_command(worker() + common + " --node-rank 1 & " + worker() + common +
                                      " --node-rank 0; a=$?; wait $!; b=$?; [ $a = 0 ] && [ $b = 0 ]",
                                  120);
  expect_complete_group(result, 4, "volt", 2, 2);
}

TEST(LauncherTest, AutoStrategyWithSeveralProcessesIsDDPAndSingleDeviceIsRefused) {
  // auto → ddp with two processes (the training itself is checked in distributed_training_test).
  const auto result = run_command(worker() + " --mode train --devices 2 --max-epochs 1 --timeout 60"
                                             " --enable-progress-bar false --logger none --enable-checkpointing false",
                                  120);
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("TRAINED rank=1"), std::string::npos) << result.output;
  const auto single = run_command(worker() + " --mode train --devices 2 --strategy single_device", 60);
  EXPECT_EQ(single.exit_code, 2) << single.output;
  EXPECT_NE(single.output.find("--strategy single_device runs a single process, but 2 processes"), std::string::npos)
      << single.output;
}

TEST(TorchrunTest, StartsRanksThatFindEachOtherThroughTheAgentStore) {
  const int64_t port = find_free_port();
  const auto result = run_command(torchrun() + " --no_python --nproc_per_node 2 "
                                  "--redirects 1 --tee 1 --master_port " + std::to_string(port) + " " + worker() +
                                      " --mode collectives --timeout 60",
                                  180);
  expect_complete_group(result, 2, "torchelastic", 2, 1);
}

TEST(MpirunTest, StartsRanksThatMeetThroughATCPStore) {
  const int64_t port = find_free_port();
  const auto result = run_command("mpirun --allow-run-as-root --oversubscribe -np 3 -x MASTER_PORT=" +
                                      std::to_string(port) + " " + worker() + " --mode collectives --timeout 60",
                                  180);
  expect_complete_group(result, 3, "mpi", 3, 1);
}

// Two network namespaces joined by a veth pair: two "machines" with their own addresses, so the
// ranks must bind to the right interface and reach each other through it, not through loopback.
TEST(NetworkNamespaceTest, TwoNodesOverAVethPair) {
  const std::string suffix = std::to_string(getpid() % 100000);
  const std::string a = "volt_a" + suffix, b = "volt_b" + suffix;
  const std::string subnet = "10.213." + std::to_string(getpid() % 200 + 10);
  const std::string setup = "ip netns add " + a + " && ip netns add " + b + " && ip link add va" + suffix +
                            " type veth peer name vb" + suffix + " && ip link set va" + suffix + " netns " + a +
                            " && ip link set vb" + suffix + " netns " + b + " && ip -n " + a + " addr add " + subnet +
                            ".1/24 dev va" + suffix + " && ip -n " + b + " addr add " + subnet + ".2/24 dev vb" +
                            suffix + " && ip -n " + a + " link set va" + suffix + " up && ip -n " + b +
                            " link set vb" + suffix + " up && ip -n " + a + " link set lo up && ip -n " + b +
                            " link set lo up";
  const std::string teardown = "ip netns del " + a + " 2>/dev/null; ip netns del " + b + " 2>/dev/null; true";
  const auto prepared = run_command(setup, 30);
  if (prepared.exit_code != 0) {
    run_command(teardown, 30);
    GTEST_SKIP() << "cannot create network namespaces here (needs root / CAP_NET_ADMIN and iproute2): "
                 << prepared.output;
  }
  const std::string common = " --mode collectives --devices 2 --num-nodes 2 --master-addr " + subnet +
                             ".1 --master-port 29533 --timeout 60";
  const auto result = run_command("ip netns exec " + b + " " + worker() + common + " --node-rank 1 & ip netns exec " +
                                      a + " " + worker() + common + " --node-rank 0; a=$?; wait $!; b=$?; [ $a = 0 ] && [ $b = 0 ]",
                                  120);
  run_command(teardown, 30);
  expect_complete_group(result, 4, "volt", 2, 2);
}

}  // namespace
}  // namespace volt
