#pragma once
// Note [Fault-tolerant replicas]: the run is R replica groups, each launched on its own (its own
// torchrun or volt launcher, since a launcher restarts all the processes it started when one dies),
// each training the whole model with its own strategy (ddp, fsdp, ...) over its own process group.
// Before every optimizer step the replicas alive agree on a quorum through the lighthouse
// (lighthouse.h), a process of its own that none of them hosts. The quorum says who takes part in
// the step and at which step each member stands:
//   - a member behind the others, or one that has just started, first heals: it receives the
//     whole training state (model, optimizer, loop position, callbacks) from an up-to-date member
//     over the network (no checkpoint is read) and continues from it;
//   - the members then train one replica batch each and average their gradients over the
//     quorum's members only (replica_link.h), per rank of a replica;
//   - a step commits only where every rank of a replica saw every cross-replica operation
//     succeed; a replica that dies mid-step makes the others' step fail, uncommitted, and the next
//     quorum goes on without it. A member that committed a step another did not is simply ahead
//     at the next quorum, and the other heals from it.
// The committed step count is therefore the one source of truth: equal step, equal state.
// This header is the quorum itself and the rules every member applies to it, the same on every
// rank, so that nobody has to be told its role.
#include <cstdint>
#include <string>
#include <vector>

namespace volt {

struct QuorumMember {
  int64_t replica = 0;  // the replica group's id, in [0, replicas)
  int64_t step = 0;     // its committed optimizer steps when it asked to join
  bool fresh = false;   // its process has not taken part in a quorum yet (started or restarted)
};

struct Quorum {
  int64_t id = 0;  // counts the quorums the lighthouse formed, from 1
  // Changes whenever the members change or one of them failed its last step: the members then
  // connect new cross-replica groups (replica_link.h), as the old ones may be broken.
  int64_t generation = 0;
  std::vector<QuorumMember> members;  // by replica id, ascending

  // The member's position in `members`, or -1.
  int64_t index_of(int64_t replica) const;
  int64_t max_step() const;
  // The members every other member heals from: those at max_step() that have trained in a quorum
  // before, or, where none has (the run's first quorum), the lowest replica at max_step().
  std::vector<int64_t> sources() const;
  // The member `replica` heals from (a replica id), or -1 when it is a source itself.
  int64_t source_of(int64_t replica) const;
  // The replicas that heal from `replica` (empty unless it is a source), ascending.
  std::vector<int64_t> healers_of(int64_t replica) const;

  // The text the lighthouse writes and the members read back; decode() throws DistributedError
  // naming `what` for text that is not a quorum.
  std::string encode() const;
  static Quorum decode(const std::string& text, const std::string& what);
};

// Note [The data order of fault-tolerant replicas]: an epoch's replica batches are the batches a
// single replica's loader would take, in its order (replica batch c is batch c of every rank of
// the replica). A step of a quorum of m members, at position `first` (the replica batches its
// committed steps consumed), trains batches first, first + 1, ..., one per member in the order of
// `members`, as far as the epoch has batches; a member past the end trains none that step. The
// position advances only when the step commits. So every replica batch of an epoch is trained in
// exactly one committed step, whatever fails, and in the epoch's order.
struct QuorumBatches {
  int64_t mine = -1;    // the replica batch this member trains, or -1 (none left in the epoch)
  int64_t trained = 0;  // how many members train one: the step's gradients are their mean
};
QuorumBatches batches_of_step(const Quorum& quorum, int64_t replica, int64_t first, int64_t epoch_batches);

}  // namespace volt
