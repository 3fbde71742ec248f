#pragma once
// The lighthouse of fault-tolerant replicas (Note [Fault-tolerant replicas] in quorum.h): a
// process of its own, which no replica hosts, so that it outlives any of them. It hosts a c10d
// TCPStore that every rank of every replica connects to, and a thread that forms the quorums:
//   - the leader (rank 0) of each replica beats a heartbeat through the store from its first
//     request on; a replica whose heartbeat stops for heartbeat_timeout is dead;
//   - a leader asks to join the next quorum, with its committed step, whether its last step
//     failed and its model's fingerprint;
//   - a quorum forms when every live replica has asked (at least min_replicas of them), or, once
//     join_timeout has passed since the first asked, with those that have; the answer is the
//     Quorum (quorum.h), the same text for every member.
// A request whose fingerprint differs from the first one the lighthouse saw (another model,
// another replica size) is answered with an error, which the replica raises.
// The cross-replica process groups rendezvous through the same store (replica_link.h).
//
// Thread-safe: the constructor starts the thread and the destructor stops it.
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

namespace volt {

struct LighthouseOptions {
  int64_t port = 29510;      // the store's port (every interface); 0: any free port (see Lighthouse::port)
  int64_t replicas = 0;      // replica groups of the run, >= 1; every request must say the same
  int64_t min_replicas = 1;  // a quorum needs at least this many members, in [1, replicas]
  // How long the replicas that asked wait for a live one that has not, before a quorum forms
  // without it (a replica alive but stuck).
  std::chrono::milliseconds join_timeout{std::chrono::seconds(30)};
  // How long a replica's heartbeat may stop before it counts as dead (a replica's leader beats
  // every ReplicaLinkOptions::heartbeat_interval, on a thread of its own).
  std::chrono::milliseconds heartbeat_timeout{std::chrono::seconds(2)};
  // Throws ConfigurationError naming the field, the value and what is allowed.
  void validate() const;
};

class Lighthouse {
 public:
  // Starts the store on `options.port` and the thread that forms quorums. Throws
  // DistributedError when the port cannot be bound.
  explicit Lighthouse(const LighthouseOptions& options);
  ~Lighthouse();
  Lighthouse(const Lighthouse&) = delete;
  Lighthouse& operator=(const Lighthouse&) = delete;

  int64_t port() const;
  // Quorums formed so far.
  int64_t quorums() const;
  // One line on what the lighthouse waits for, or on the last quorum it formed.
  std::string status() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace volt
