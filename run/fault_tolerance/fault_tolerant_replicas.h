#pragma once
// What a training loop does, step by step, to be one replica group of a fault-tolerant run
// (Note [Fault-tolerant replicas] in distributed/fault_tolerance/quorum.h): join the step's
// quorum, heal from an up-to-date member when behind, train the replica batch the quorum deals it
// (Note [The data order of fault-tolerant replicas]), average the gradients over the quorum, and
// commit the step only where every cross-replica operation succeeded on every rank of the replica.
//
// The loop owns the training state; this class moves it only through the two functions it is
// given (StateTransfer): the loop's checkpoint of itself, as bytes, and its restore.
// Every method is a [collective] of the replica's own ranks (its strategy's collectives), never
// of the other replicas: those are reached through the ReplicaLink, whose failures end a step,
// never the run.
#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "distributed/fault_tolerance/quorum.h"
#include "run/fault_tolerance/fault_tolerance_options.h"

namespace volt {

class ReplicaLink;
class Strategy;

class FaultTolerantReplicas {
 public:
  struct StateTransfer {
    // This rank's training state as the strategy's checkpoint layout holds it (complete on rank 0
    // for a full layout, this rank's shard for a sharded one). [collective]
    std::function<std::string()> dump;
    // Continues from what dump() returned on the same rank of an up-to-date replica. [collective]
    std::function<void(const std::string&)> restore;
  };

  // What this replica does in the step about to start.
  struct Step {
    bool healed = false;  // the state was replaced: the loop re-reads its position and asks again
    bool ok = true;       // false: the step cannot commit (a cross-replica group failed); skip it
    QuorumBatches batches;
    int64_t quorum = 0;  // the quorum's id
    int64_t members = 0;
  };

  // Connects to the lighthouse (ReplicaLink). `model` gives the fingerprint the replicas compare.
  FaultTolerantReplicas(const FaultToleranceOptions& options, Strategy& strategy, torch::nn::Module& model,
                        StateTransfer transfer);
  ~FaultTolerantReplicas();

  // Joins the quorum of the step after `committed_steps` (once: after a heal it returns the same
  // quorum's batches from the restored position `first_batch`), heals this replica when the quorum
  // says so. `epoch_batches`: the replica batches of the current epoch. [collective]
  Step begin_step(int64_t committed_steps, int64_t first_batch, int64_t epoch_batches);
  // After the step's backward (or none, when this replica trains no batch): the optimizers'
  // gradients summed over the quorum's members (zeros for a member without a batch) and divided by
  // the members that trained one. Returns whether the step commits; when it does not, the caller
  // discards the gradients and the step. [collective]
  bool finish_step(const std::vector<std::shared_ptr<torch::optim::Optimizer>>& optimizers);

  // Counters since the fit started: steps this replica took part in, steps committed, heals.
  int64_t steps_taken() const { return steps_taken_; }
  int64_t steps_committed() const { return steps_committed_; }
  int64_t heals() const { return heals_; }
  int64_t last_quorum() const { return quorum_.id; }
  int64_t replica() const { return options_.replica; }

 private:
  // The replica's rank 0's text, on every rank of the replica.
  std::string from_replica_leader(const std::string& text);
  // Whether every rank of the replica says true.
  bool everyone(bool mine);
  void heal_others();
  bool heal_from(int64_t source);

  FaultToleranceOptions options_;
  Strategy& strategy_;
  StateTransfer transfer_;
  std::unique_ptr<ReplicaLink> link_;
  bool full_layout_ = true;  // the strategy's checkpoint layout: rank 0 alone sends and receives
  Quorum quorum_;
  bool joined_ = false;  // a quorum joined whose step has not finished
  bool ok_ = true;
  bool last_failed_ = false;
  int64_t trained_ = 0;  // members that train a batch in the step joined
  int64_t steps_taken_ = 0, steps_committed_ = 0, heals_ = 0;
};

}  // namespace volt
