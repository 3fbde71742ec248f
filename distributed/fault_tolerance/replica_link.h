#pragma once
// One rank's link to the other replicas of a fault-tolerant run (Note [Fault-tolerant replicas]
// in quorum.h): its replica's requests to the lighthouse (on the replica's leader, rank 0), and
// its cross-replica group: rank k of every member of the current quorum, over Gloo, connected
// through the lighthouse's store again whenever the quorum's generation changes. Every
// cross-replica operation reports failure by returning false (a dead member, a timeout) and then
// drops the group, which makes the other members' operations on it fail at once instead of
// waiting for the timeout; a replica never fails because another one did.
//
// Not thread-safe: the training thread calls it (the leader's heartbeat runs on a thread of its own).
#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "distributed/fault_tolerance/quorum.h"

namespace volt {

class Communicator;

struct ReplicaLinkOptions {
  std::string lighthouse_host = "127.0.0.1";
  int64_t lighthouse_port = 29510;
  int64_t replicas = 1;      // replica groups of the run
  int64_t replica = 0;       // this rank's replica group, in [0, replicas)
  int64_t replica_rank = 0;  // this rank within its replica group
  int64_t replica_size = 1;  // the replica group's processes
  // Bound on connecting a cross-replica group and on each operation over it.
  std::chrono::milliseconds timeout{std::chrono::seconds(10)};
  // How long the leader waits for a quorum before it fails (all other replicas down and fewer
  // than min_replicas left, or a lighthouse that does not answer).
  std::chrono::milliseconds quorum_timeout{std::chrono::minutes(5)};
  std::chrono::milliseconds heartbeat_interval{100};
  // What the lighthouse compares between replicas (the model, the strategy, the replica size).
  std::string fingerprint;
  // The device the tensors handed to all_reduce_sum live on (staged through the host: Gloo).
  torch::Device device = torch::kCPU;
  void validate() const;
};

class ReplicaLink {
 public:
  // Connects to the lighthouse's store. Throws DistributedError when it cannot be reached.
  explicit ReplicaLink(const ReplicaLinkOptions& options);
  ~ReplicaLink();
  ReplicaLink(const ReplicaLink&) = delete;
  ReplicaLink& operator=(const ReplicaLink&) = delete;

  const ReplicaLinkOptions& options() const { return options_; }

  // The leader's request to join the next quorum at `step` committed steps; blocks until the
  // lighthouse forms it. The first call starts the heartbeat. Throws ConfigurationError when the
  // lighthouse refuses this replica (another model or replica count), DistributedError when no
  // quorum forms within quorum_timeout (quoting what the lighthouse waits for).
  Quorum request_quorum(int64_t step, bool last_step_failed);

  // Connects this rank's group for `quorum` (a no-op when connected for its generation already,
  // or when this replica is its only member). False when it could not.
  bool connect(const Quorum& quorum);
  // Sums `tensor` over the quorum's members, in place.
  bool all_reduce_sum(torch::Tensor& tensor);
  // `bytes` to the same rank of member replica `to` / from member replica `from`.
  bool send(const std::string& bytes, int64_t to);
  std::optional<std::string> receive(int64_t from);
  // Drops the group (its peers' operations on it then fail at once).
  void disconnect();
  // Why the last operation that returned false failed.
  const std::string& last_error() const { return last_error_; }

 private:
  bool fail(const std::string& what, const std::exception& e);

  ReplicaLinkOptions options_;
  struct Store;
  std::unique_ptr<Store> store_;
  Quorum quorum_;                        // the one `group_` was connected for
  std::shared_ptr<Communicator> group_;  // null: none (not connected, or a quorum of one)
  bool connected_ = false;
  std::string last_error_;
};

}  // namespace volt
