#include "run/fault_tolerance/fault_tolerant_replicas.h"

#include <cstring>
#include <map>
#include <sstream>

#include "checkpoint/checkpoint_layout.h"
#include "core/crc32c.h"
#include "core/error.h"
#include "core/warning.h"
#include "distributed/fault_tolerance/replica_link.h"
#include "strategies/checkpoint_state.h"
#include "strategies/strategy.h"

namespace volt {

namespace {

// What two replicas must share to average their gradients and trade their state: the strategy,
// the replica's size and every parameter's name, shape and dtype.
std::string fingerprint_of(const Strategy& strategy, const torch::nn::Module& model) {
  std::ostringstream text;
  text << strategy.name() << "/" << strategy.topology().world_size;
  for (const auto& item : model.named_parameters()) {
    text << "/" << item.key() << ":" << item.value().sizes() << ":" << item.value().dtype();
  }
  const std::string all = text.str();
  std::ostringstream out;
  out << strategy.name() << "-" << strategy.topology().world_size << "-" << std::hex << crc32c(all.data(), all.size());
  return out.str();
}

}  // namespace

FaultTolerantReplicas::FaultTolerantReplicas(const FaultToleranceOptions& options, Strategy& strategy,
                                             torch::nn::Module& model, StateTransfer transfer)
    : options_(options), strategy_(strategy), transfer_(std::move(transfer)) {
  options_.validate();
  const auto topology = strategy.topology();
  full_layout_ = strategy.checkpointing().layout() == CheckpointLayout::Full;
  link_ = std::make_unique<ReplicaLink>(ReplicaLinkOptions{.lighthouse_host = options_.host(),
                                                           .lighthouse_port = options_.port(),
                                                           .replicas = options_.replicas,
                                                           .replica = options_.replica,
                                                           .replica_rank = topology.global_rank,
                                                           .replica_size = topology.world_size,
                                                           .timeout = options_.timeout,
                                                           .quorum_timeout = options_.quorum_timeout,
                                                           .fingerprint = fingerprint_of(strategy, model),
                                                           .device = strategy.root_device()});
}

FaultTolerantReplicas::~FaultTolerantReplicas() = default;

std::string FaultTolerantReplicas::from_replica_leader(const std::string& text) {
  auto& collectives = strategy_.collectives();
  if (strategy_.topology().world_size == 1) return text;
  const int64_t size = collectives.broadcast_int(static_cast<int64_t>(text.size()));
  auto bytes = torch::empty({size}, torch::kUInt8);
  if (strategy_.topology().global_rank == 0) std::memcpy(bytes.data_ptr(), text.data(), text.size());
  bytes = collectives.broadcast(bytes.to(collectives.root_device())).cpu();
  return {static_cast<const char*>(bytes.data_ptr()), static_cast<size_t>(size)};
}

bool FaultTolerantReplicas::everyone(bool mine) { return strategy_.collectives().reduce_boolean_decision(mine, true); }

FaultTolerantReplicas::Step FaultTolerantReplicas::begin_step(int64_t committed_steps, int64_t first_batch,
                                                              int64_t epoch_batches) {
  if (!joined_) {
    const bool leader = strategy_.topology().global_rank == 0;
    const std::string text =
        from_replica_leader(leader ? link_->request_quorum(committed_steps, last_failed_).encode() : "");
    quorum_ = Quorum::decode(text, "the quorum replica " + std::to_string(options_.replica) + "'s rank 0 shared");
    joined_ = true;
    ++steps_taken_;
    ok_ = everyone(link_->connect(quorum_));
    if (ok_) heal_others();
    const int64_t source = quorum_.source_of(options_.replica);
    if (ok_ && source >= 0) {
      ok_ = heal_from(source);
      if (ok_) return {.healed = true, .ok = true, .quorum = quorum_.id, .members = int64_t(quorum_.members.size())};
    }
  }
  const auto batches = batches_of_step(quorum_, options_.replica, first_batch, epoch_batches);
  trained_ = batches.trained;
  return {.healed = false,
          .ok = ok_ && trained_ > 0,
          .batches = batches,
          .quorum = quorum_.id,
          .members = static_cast<int64_t>(quorum_.members.size())};
}

void FaultTolerantReplicas::heal_others() {
  const auto healers = quorum_.healers_of(options_.replica);
  if (healers.empty()) return;
  const std::string state = transfer_.dump();
  if (full_layout_ && strategy_.topology().global_rank != 0) return;
  // A healer that died on the way fails its own step; this replica learns it in the step's
  // average, which then fails too.
  for (const auto healer : healers) link_->send(state, healer);
}

bool FaultTolerantReplicas::heal_from(int64_t source) {
  const bool receives = !full_layout_ || strategy_.topology().global_rank == 0;
  std::optional<std::string> state;
  if (receives) state = link_->receive(source);
  if (!everyone(!receives || state.has_value())) {
    if (receives && !state)
      warn("--fault-tolerance: replica " + std::to_string(options_.replica) + " could not heal from replica " +
           std::to_string(source) + ": " + link_->last_error() + "; it asks the next quorum again");
    link_->disconnect();
    return false;
  }
  const std::string bytes = full_layout_ ? from_replica_leader(state.value_or("")) : *state;
  transfer_.restore(bytes);
  ++heals_;
  return true;
}

bool FaultTolerantReplicas::finish_step(const std::vector<std::shared_ptr<torch::optim::Optimizer>>& optimizers) {
  VOLT_INTERNAL_ASSERT(joined_, "finish_step without begin_step");
  joined_ = false;
  bool ok = ok_ && trained_ > 0;
  if (ok) {
    // Every optimizer's parameters, in order, as one flat tensor per dtype; zeros where this
    // replica has no gradient (no batch this step), so that every member sends the same shapes.
    std::vector<torch::Tensor> params;
    for (const auto& optimizer : optimizers) {
      for (const auto& group : optimizer->param_groups()) {
        for (const auto& p : group.params()) params.push_back(p);
      }
    }
    std::map<c10::ScalarType, std::vector<torch::Tensor>> by_dtype;
    for (const auto& p : params) by_dtype[p.scalar_type()].push_back(p);
    for (auto& [dtype, members] : by_dtype) {
      std::vector<torch::Tensor> flat;
      for (const auto& p : members) {
        flat.push_back(p.grad().defined() ? p.grad().detach().reshape({-1}) : torch::zeros({p.numel()}, p.options()));
      }
      auto sum = torch::cat(flat);
      ok = link_->all_reduce_sum(sum);
      if (!ok) break;
      sum.div_(static_cast<double>(trained_));
      int64_t offset = 0;
      for (const auto& p : members) {
        auto slice = sum.narrow(0, offset, p.numel()).view(p.sizes());
        offset += p.numel();
        if (p.grad().defined()) {
          p.mutable_grad().copy_(slice);
        } else {
          p.mutable_grad() = slice.clone();
        }
      }
    }
  }
  const bool commit = everyone(ok);
  if (!commit) link_->disconnect();
  last_failed_ = !commit;
  if (commit) ++steps_committed_;
  return commit;
}

}  // namespace volt
