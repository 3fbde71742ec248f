#pragma once
// SlowMo's model averaging (Wang, Tantia, Ballas, Rabbat, "SlowMo: Improving Communication-Efficient
// Distributed SGD with Slow Momentum", ICLR 2020, Algorithm 1; fairscale's
// SlowMoDistributedDataParallel.perform_slowmo with slowmo_base_algorithm="localsgd"), run after
// every optimizer step. Gradients are averaged within each node every step (DDP on the node group,
// not here), so a node's processes hold the same model; this averager, counting optimizer steps
// s = 0, 1, ...:
//   - local SGD: when (s + 1) % localsgd_frequency == 0, the models are averaged across nodes (the
//     node leaders all-reduce, then each leader broadcasts within its node);
//   - slow momentum: when (s + 1) % slowmo_frequency == 0 (a multiple of localsgd_frequency, so the
//     models were just averaged: x̄ is the exact mean over all ranks), with γ each parameter's
//     current learning rate:  u ← β·u + (x_old − x̄)/γ;  x_old ← x_old − α·γ·u;  x ← x_old.
// x_old starts as this rank's parameters after its first optimizer step, u at zero (Note [x_old after
// the first step]). α = 1, β = 0 turns the slow momentum off (x_old would just follow x̄), as in
// fairscale: plain local SGD, no buffers.
//
// Memory: u and x_old cover the parameters flattened in order; with memory_efficient they are split
// into min(world, num_shards) contiguous shards, shard k on global rank k, which updates it; then
// every rank gets every shard's new parameters (one all-gather when every rank owns a shard,
// otherwise a broadcast from each owner), so each rank holds 2/shards of the model instead of two
// copies. Both layouts compute the same elements with the same operations from the same x̄ and
// x_old: where the ranks agree after the first step (one node, or localsgd_frequency 1), their
// results are bitwise equal.
// (fairscale reduces each shard to its owner instead of averaging over the leaders first; here the
// slow momentum step reuses the cross-node average the local-SGD step takes anyway, so its
// inter-node traffic is the leaders' all-reduce plus the distribution of the shards.)
//
// Every trainable parameter must have the same floating dtype (one flat layout). The groups come
// from `topology`, which must outlive the averager. Not thread-safe: the training thread calls it.
#include <functional>
#include <vector>

#include "distributed/topology.h"
#include "strategies/averaging/model_averager.h"

namespace volt::averaging {

// Note [x_old after the first step]
// The paper's Algorithm 1 starts x_old at the initial parameters x_{0,0}. fairscale's
// SlowMoDistributedDataParallel, the implementation users come from and this strategy's oracle
// (tests/strategies/fairscale_oracle_test.cpp), takes it in the first perform_slowmo(), which runs
// after the first optimizer step: each rank copies its own parameters then. volt does the same, so
// that it trains like fairscale step for step. Two consequences, both fairscale's:
// - the first slow momentum step is unaffected when α = 1 (x_old − α·γ·u = x̄ whatever x_old is);
//   u, and so every later step, carries the difference;
// - between nodes the models differ after a local step, so with memory_efficient each shard's
//   x_old comes from its owner's model, and without it each rank keeps its own x_old and u, and
//   the ranks of different nodes leave a slow momentum step with models that differ by the
//   β-weighted part of u (which decays, and the next average removes).

struct SlowMomentumOptions {
  double momentum = 0.5;           // β, in [0, 1)
  double lr = 1.0;                 // α, > 0
  int64_t slowmo_frequency = 48;   // τ: optimizer steps between slow momentum steps
  int64_t localsgd_frequency = 3;  // optimizer steps between averages across nodes
  bool memory_efficient = true;    // shard u and x_old across ranks
  int64_t num_shards = 32;         // shards when memory_efficient (at most the world size)

  // Whether the slow momentum step runs at all (α ≠ 1 or β ≠ 0).
  bool slow_momentum() const { return lr != 1.0 || momentum != 0.0; }
  // Ranges, and slowmo_frequency a multiple of localsgd_frequency (the slow momentum step needs the
  // exact mean the local-SGD average of the same step gives). Throws ConfigurationError naming `owner`.
  void validate(const std::string& owner) const;
};

// The current learning rate of every parameter, in average_parameters' order.
using LearningRates = std::function<std::vector<double>()>;

class SlowMomentumAverager : public ModelAverager {
 public:
  // `learning_rates` is asked at every slow momentum step. Throws ConfigurationError for options
  // validate() refuses.
  SlowMomentumAverager(Topology& topology, SlowMomentumOptions options, LearningRates learning_rates);
  std::string name() const override { return "slow momentum averager"; }

  // Throws ConfigurationError, with slow momentum, for parameters of several dtypes or a
  // non-floating one (the buffers are one flat tensor).
  void check_parameters(const std::vector<torch::Tensor>& parameters) const;
  // x_old ← `parameters` (this rank's shard of them), u ← 0. average_parameters calls it after the
  // first optimizer step; a second call does nothing. Checks the parameters first (check_parameters).
  void initialize(const std::vector<torch::Tensor>& parameters);
  bool initialized() const { return initialized_; }

  // [collective: across nodes at local-SGD steps, over the world at slow momentum steps]
  void average_parameters(const std::vector<torch::Tensor>& parameters) override;
  // The schedule alone, for optimizer step `step` (0-based).
  bool averages_across_nodes_at(int64_t step) const;
  bool slow_momentum_at(int64_t step) const;

  const SlowMomentumOptions& options() const { return options_; }
  // Bytes of u and x_old held now (live tensors).
  int64_t buffer_bytes() const;

  // Shards differ per rank; so do whole buffers, each rank's x_old taken from its own model
  // (Note [x_old after the first step]).
  bool state_differs_per_rank() const override { return options_.slow_momentum(); }
  // {"step"} plus, once initialized, {"old_parameters", "momentum", "begin", "end", "total"}.
  StateDict state_dict() const override;
  // Throws CheckpointError when the buffers cover other elements than this run's shard.
  void load_state_dict(const StateDict& state) override;

 private:
  // total_, shards_, shard_length_ and this rank's [begin_, end_) for `total` elements.
  void lay_out(int64_t total);
  // Every rank's parameters ← the mean over nodes. [collective over the leaders, then the node]
  void average_across_nodes(const std::vector<torch::Tensor>& parameters);
  // The slow momentum step on this rank's shard, then every rank gets every shard's new
  // parameters. [collective over the world when memory_efficient]
  void slow_momentum_step(const std::vector<torch::Tensor>& parameters);

  Topology& topology_;
  SlowMomentumOptions options_;
  LearningRates learning_rates_;
  bool initialized_ = false;
  int64_t total_ = 0;         // elements of all parameters
  int64_t shard_length_ = 0;  // elements per shard (the last may be shorter)
  int64_t shards_ = 1;
  int64_t begin_ = 0, end_ = 0;
  torch::Tensor old_parameters_, momentum_;  // x_old and u over [begin_, end_)
};

}  // namespace volt::averaging
