#include "strategies/replica_shards.h"

namespace volt {

ReplicaShards::ReplicaShards(std::vector<std::pair<std::string, torch::Tensor>> parameters, Communicator& group,
                             std::string owner)
    : flat_(std::make_unique<fsdp::FlatParameter>(std::move(parameters), group, std::nullopt, nullptr, 0, false,
                                                  fsdp::ShardLayout::PerParameter)),
      group_(group),
      owner_(std::move(owner)) {
  flat_->release();
}

void ReplicaShards::gather() {
  if (!flat_->gathered()) flat_->gather();
}

ScopeGuard ReplicaShards::gathered_while() {
  const bool was_released = !flat_->gathered();
  gather();
  return ScopeGuard([this, was_released] {
    if (was_released) flat_->release();
  });
}

void ReplicaShards::reduce_gradients() {
  if (flat_->gradient_numel() > 0) {
    const int64_t world = group_.size();
    const double pre_divide = fsdp::gradient_pre_divide_factor(world);
    auto rows = torch::empty({world, flat_->gradient_numel() / world},
                             torch::TensorOptions().dtype(torch::kFloat).device(flat_->compute_device()));
    flat_->write_flat_gradient(rows, pre_divide);
    flat_->accumulate_reduced(group_.reduce_scatter(rows.reshape({-1})), pre_divide);
  }
  flat_->release();
}

void ReplicaShards::store_gathered_into_shards() {
  torch::NoGradGuard no_grad;
  const int64_t rank = group_.rank();
  for (const auto& entry : flat_->entries()) {
    const int64_t count = entry.chunk.count(rank);
    if (count == 0) continue;
    entry.shard.detach()
        .view({-1})
        .narrow(0, 0, count)
        .copy_(entry.parameter.detach().reshape({-1}).narrow(0, entry.chunk.begin(rank), count));
  }
}

void ReplicaShards::restore() { flat_->restore_parameters(); }

void ReplicaShards::take_optimizers(const std::vector<std::shared_ptr<torch::optim::Optimizer>>& optimizers,
                                    const std::string& strategy) {
  optimizer_layouts_ = fsdp::replace_parameters_by_shards(optimizers, {{flat_.get(), owner_}}, strategy);
}

}  // namespace volt
