#include "strategies/averaging/slow_momentum_averager.h"

#include <algorithm>

#include "core/error.h"
#include "distributed/flat_buffers.h"
#include "strategies/averaging/parameter_mean.h"

namespace volt::averaging {

void SlowMomentumOptions::validate(const std::string& owner) const {
  check<ConfigurationError>(momentum >= 0.0 && momentum < 1.0, owner, ": expected slowmo_momentum in [0, 1), got ",
                            momentum);
  check<ConfigurationError>(lr > 0.0, owner, ": expected slowmo_lr > 0, got ", lr);
  check<ConfigurationError>(localsgd_frequency >= 1, owner, ": expected localsgd_frequency >= 1, got ",
                            localsgd_frequency);
  check<ConfigurationError>(slowmo_frequency >= 1, owner, ": expected slowmo_frequency >= 1, got ", slowmo_frequency);
  check<ConfigurationError>(num_shards >= 1, owner, ": expected num_shards >= 1, got ", num_shards);
  // fairscale only recommends it; its slow momentum step would then start from models that were not
  // averaged (without memory_efficient) or skip a local-SGD average (with it).
  check<ConfigurationError>(slowmo_frequency % localsgd_frequency == 0, owner, ": expected slowmo_frequency a "
                            "multiple of localsgd_frequency (the slow momentum step needs the exact mean the local-SGD "
                            "average of the same step gives), got slowmo_frequency=", slowmo_frequency,
                            " and localsgd_frequency=", localsgd_frequency, "; e.g. slowmo_frequency=",
                            std::max<int64_t>(1, slowmo_frequency / localsgd_frequency) * localsgd_frequency);
}

SlowMomentumAverager::SlowMomentumAverager(Topology& topology, SlowMomentumOptions options,
                                           LearningRates learning_rates)
    : ModelAverager(/*warmup_steps=*/0),
      topology_(topology),
      options_(options),
      learning_rates_(std::move(learning_rates)) {
  options_.validate("slow momentum averager");
  VOLT_INTERNAL_ASSERT(learning_rates_ != nullptr, "slow momentum averager: no learning-rate source");
}

bool SlowMomentumAverager::averages_across_nodes_at(int64_t step) const {
  return topology_.num_nodes() > 1 && (step + 1) % options_.localsgd_frequency == 0;
}

bool SlowMomentumAverager::slow_momentum_at(int64_t step) const {
  return options_.slow_momentum() && (step + 1) % options_.slowmo_frequency == 0;
}

void SlowMomentumAverager::check_parameters(const std::vector<torch::Tensor>& parameters) const {
  if (!options_.slow_momentum()) return;  // averaging alone works per dtype
  for (const auto& p : parameters) {
    check<ConfigurationError>(p.is_floating_point(), "slowmo: expected floating-point parameters, got ",
                              c10::toString(p.scalar_type()));
    check<ConfigurationError>(p.scalar_type() == parameters.front().scalar_type(), "slowmo: the slow momentum "
                              "buffers cover the parameters as one flat tensor, which needs one dtype; got ",
                              c10::toString(parameters.front().scalar_type()), " and ",
                              c10::toString(p.scalar_type()), "; convert the model to one dtype");
  }
}

void SlowMomentumAverager::initialize(const std::vector<torch::Tensor>& parameters) {
  if (initialized_) return;
  check_parameters(parameters);
  initialized_ = true;
  if (!options_.slow_momentum()) return;
  int64_t total = 0;
  for (const auto& p : parameters) total += p.numel();
  lay_out(total);
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> parts;
  for (const auto& p : parameters) parts.push_back(p.detach().reshape(-1));
  old_parameters_ = torch::cat(parts).narrow(0, begin_, end_ - begin_).clone();
  momentum_ = torch::zeros_like(old_parameters_);
}

void SlowMomentumAverager::lay_out(int64_t total) {
  const int64_t world = topology_.world_size(), rank = topology_.world().rank();
  total_ = total;
  shards_ = options_.memory_efficient ? std::min(world, options_.num_shards) : 1;
  shard_length_ = (total + shards_ - 1) / shards_;
  begin_ = end_ = 0;
  if (!options_.memory_efficient) {
    end_ = total;
  } else if (rank < shards_) {
    begin_ = std::min(rank * shard_length_, total);
    end_ = std::min((rank + 1) * shard_length_, total);
  }
}

int64_t SlowMomentumAverager::buffer_bytes() const {
  if (!old_parameters_.defined()) return 0;
  return (old_parameters_.numel() + momentum_.numel()) * static_cast<int64_t>(old_parameters_.element_size());
}

void SlowMomentumAverager::average_parameters(const std::vector<torch::Tensor>& parameters) {
  initialize(parameters);  // x_old: after the first optimizer step, as fairscale (Note [x_old after the first step])
  const bool slow_momentum = slow_momentum_at(step_);
  if (slow_momentum || averages_across_nodes_at(step_)) average_across_nodes(parameters);
  if (slow_momentum) slow_momentum_step(parameters);
  ++step_;
}

void SlowMomentumAverager::average_across_nodes(const std::vector<torch::Tensor>& parameters) {
  if (topology_.num_nodes() == 1) return;  // the node group already averaged: every rank holds x̄
  // A node's processes hold the same model (their gradients were averaged every step), so the mean
  // over the leaders is the mean over every rank; the leaders then hand it to their node.
  if (auto* leaders = topology_.leaders()) replace_by_mean(parameters, *leaders);
  auto& node = topology_.node();
  if (node.size() > 1) through_flat_buffers(parameters, [&node](torch::Tensor& flat) { node.broadcast(flat, 0); });
}

void SlowMomentumAverager::slow_momentum_step(const std::vector<torch::Tensor>& parameters) {
  VOLT_INTERNAL_ASSERT(initialized_, "slowmo: initialize() must run before the first slow momentum step");
  const auto rates = learning_rates_();
  VOLT_INTERNAL_ASSERT(rates.size() == parameters.size(), "slowmo: ", rates.size(), " learning rates for ",
                       parameters.size(), " parameters");
  const double beta = options_.momentum, alpha = options_.lr;
  const int64_t step = step_;
  through_flat_buffers(parameters, [&](torch::Tensor& flat) {  // flat: x̄, one dtype (initialize)
    VOLT_INTERNAL_ASSERT(flat.numel() == total_, "slowmo: the parameters hold ", flat.numel(),
                         " elements, the slow momentum buffers were laid out for ", total_);
    // Restored buffers come from the checkpoint's device and dtype.
    if (old_parameters_.device() != flat.device() || old_parameters_.scalar_type() != flat.scalar_type()) {
      old_parameters_ = old_parameters_.to(flat.options());
      momentum_ = momentum_.to(flat.options());
    }
    int64_t offset = 0;
    for (size_t i = 0; i < parameters.size(); ++i) {
      const int64_t lo = std::max(offset, begin_), hi = std::min(offset + parameters[i].numel(), end_);
      offset += parameters[i].numel();
      if (lo >= hi) continue;
      const double gamma = rates[i];
      check<ConfigurationError>(gamma > 0.0, "slowmo: the slow momentum step at optimizer step ", step + 1,
                                " divides by the learning rate, which is ", gamma, " for parameter ", i,
                                "; keep every learning rate above zero (e.g. a warm-up that starts above 0)");
      auto mean = flat.narrow(0, lo, hi - lo);
      auto old = old_parameters_.narrow(0, lo - begin_, hi - lo);
      auto u = momentum_.narrow(0, lo - begin_, hi - lo);
      // u ← β·u + (x_old − x̄)/γ, rounded as fairscale's _perform_local_optimization rounds it
      // (x̄ and x_old each times 1/γ): the slow momentum amplifies a rounding difference by 1/γ.
      u.mul_(beta).sub_(mean, 1.0 / gamma).add_(old, 1.0 / gamma);
      old.add_(u, -alpha * gamma);                  // x_old ← x_old − α·γ·u
      mean.copy_(old);                              // x ← x_old
    }
    if (!options_.memory_efficient) return;  // every rank updated every element
    auto& world = topology_.world();
    if (shards_ == world.size()) {
      // Every rank owns a shard: one all-gather of equal pieces (the last one padded), a ring whose
      // links each carry (n-1)/n of the model, instead of n broadcasts that each cross every link.
      auto mine = torch::zeros({shard_length_}, flat.options());
      mine.narrow(0, 0, end_ - begin_).copy_(flat.narrow(0, begin_, end_ - begin_));
      auto gathered = torch::empty({shards_ * shard_length_}, flat.options());
      world.all_gather_into(gathered, mine);
      flat.copy_(gathered.narrow(0, 0, total_));
      return;
    }
    // Fewer shards than ranks: each shard's owner broadcasts the new parameters of its shard.
    for (int64_t owner = 0; owner < shards_; ++owner) {
      const int64_t lo = std::min(owner * shard_length_, total_), hi = std::min((owner + 1) * shard_length_, total_);
      if (lo >= hi) continue;
      auto shard = flat.narrow(0, lo, hi - lo);
      world.broadcast(shard, owner);
    }
  });
}

StateDict SlowMomentumAverager::state_dict() const {
  StateDict state = ModelAverager::state_dict();
  if (!initialized_ || !old_parameters_.defined()) return state;
  state.set("old_parameters", old_parameters_);
  state.set("momentum", momentum_);
  state.set("begin", begin_);
  state.set("end", end_);
  state.set("total", total_);
  return state;
}

void SlowMomentumAverager::load_state_dict(const StateDict& state) {
  ModelAverager::load_state_dict(state);
  if (!state.contains("old_parameters")) return;  // written before the first step: x_old taken after it
  check<CheckpointError>(options_.slow_momentum(), "slowmo: the checkpoint holds slow momentum buffers, but this run "
                         "has slowmo_lr=1 and slowmo_momentum=0 (no slow momentum); use the options of the run "
                         "that wrote it");
  const int64_t total = state.get_int("total"), begin = state.get_int("begin"), end = state.get_int("end");
  lay_out(total);
  check<CheckpointError>(begin == begin_ && end == end_,
                         "slowmo: the checkpoint's slow momentum buffers of this "
                         "rank cover elements [",
                         begin, ", ", end, ") of ", total, "; this run (", topology_.world_size(),
                         " ranks, memory_efficient=", options_.memory_efficient ? "true" : "false",
                         ", num_shards=", options_.num_shards, ") needs [", begin_, ", ", end_,
                         "); resume with the same world size and SlowMo options");
  const auto old = state.get_tensor("old_parameters"), u = state.get_tensor("momentum");
  check<CheckpointError>(old.numel() == end - begin && u.numel() == end - begin, "slowmo: the checkpoint's slow "
                         "momentum buffers hold ", old.numel(), " and ", u.numel(), " elements, expected ",
                         end - begin);
  old_parameters_ = old.clone();
  momentum_ = u.clone();
  initialized_ = true;
}

}  // namespace volt::averaging
