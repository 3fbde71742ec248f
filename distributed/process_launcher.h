#pragma once
// volt's own launcher, like Lightning's subprocess launcher: the process the user started becomes
// local rank 0 and re-executes its own program (same executable, same arguments) for local ranks
// 1..n-1 with the rank variables set (VOLT_LAUNCHED=1, RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, NODE_RANK, MASTER_ADDR, MASTER_PORT). The children run the whole program and
// join the same Trainer.fit as ranks of their own.
//
// Ownership: whoever starts the run owns the launcher and hands it to strategies through
// StrategyEnvironment: volt::run_main (its launcher form), or a Trainer that was given none. The
// owner outlives the children's work: when it is destroyed it waits for them (or, while an
// exception propagates, stops them). One launch per process: the children are this process's,
// and the signal forwarding below is process-wide.
//
// Watching: a thread reaps the children as they end. When one fails (non-zero exit or a signal)
// the launcher says which rank and how on stderr, stops the other children (SIGTERM, then SIGKILL
// after a grace period), and records the failure; the parent's next collective fails at once
// (its peer is gone) and volt::run_main turns the recorded failure into a non-zero exit that
// names the rank. If the parent does not reach a collective within `failure_grace`, the launcher
// ends it with SIGTERM so that nothing hangs.
// Signals: SIGINT and SIGTERM to the parent are forwarded to the children, which are reaped
// (SIGKILL after the grace period), then the parent ends by the same signal. Children get
// PR_SET_PDEATHSIG=SIGKILL: a parent killed outright takes its children with it. No zombies.
//
// Thread-safe.
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace volt {

struct LaunchOptions {
  int64_t local_world_size = 1;  // children: local ranks 1..local_world_size-1
  int64_t node_rank = 0;
  int64_t num_nodes = 1;
  std::string master_addr = "127.0.0.1";
  int64_t master_port = 29500;
  // How long children get to end after SIGTERM before SIGKILL, and how long the parent gets to
  // notice a failed child before the launcher ends it.
  std::chrono::milliseconds stop_grace{std::chrono::seconds(5)};
  std::chrono::milliseconds failure_grace{std::chrono::seconds(30)};
  // How long the parent waits, after its own work, for the children to end before stopping them
  // (a child still running then is a failure). Set it above the collective timeout.
  std::chrono::milliseconds finish_timeout{std::chrono::minutes(31)};
  // Variables added to every child's environment besides the rank variables.
  std::map<std::string, std::string> extra_environment;
};

// The environment a child for `local_rank` gets on top of the parent's (exposed for tests).
std::map<std::string, std::string> child_environment(const LaunchOptions& options, int64_t local_rank);

class ProcessLauncher {
 public:
  ProcessLauncher() = default;
  ProcessLauncher(const ProcessLauncher&) = delete;
  ProcessLauncher& operator=(const ProcessLauncher&) = delete;

  // Starts the children. Throws DistributedError when a child cannot be started (the ones
  // already started are stopped) and ConfigurationError when this process already started its
  // local ranks (through this launcher or another one).
  void launch(const LaunchOptions& options);
  bool launched() const;

  // LaunchOptions::finish_timeout of the launch (0 before one).
  std::chrono::milliseconds finish_timeout() const;
  // The first child failure seen, e.g. "rank 1 (local rank 1, pid 4242) exited with status 3"
  // or "... was killed by signal 9 (Killed)"; nullopt while none failed.
  std::optional<std::string> failure() const;

  // After the parent's own work: waits up to `timeout` for every child to end (stopping those
  // still running after it) and returns the first failure, if any. Idempotent.
  std::optional<std::string> wait_for_children(std::chrono::milliseconds timeout);
  // Stops every child still running (SIGTERM, grace, SIGKILL) and reaps them. Called when the
  // parent fails; the children's exit statuses are then not failures of their own.
  void stop_children();

  // Waits for the children (finish_timeout) and reports a failure on stderr, or stops them when
  // destroyed while an exception propagates.
  ~ProcessLauncher();

 private:
  struct State;
  State* state_ = nullptr;  // owned; allocated by launch()
};

}  // namespace volt
