#pragma once
// Post-local-SGD (Lin, Stich, Patel, Jaggi, "Don't Use Large Mini-Batches, Use Local SGD",
// ICLR 2020), with the semantics of PyTorch's post_localSGD_hook + PeriodicModelAverager /
// HierarchicalModelAverager: `ddp:comm_hook=post_local_sgd,start_local_sgd_iter=8,model_averaging_period=4`.
//
// Two objects, composed by DDP (comm_hook_registry.h, OnTopology):
//   - the hook: for the first start_local_sgd_iter synchronized iterations, gradients are
//     all-reduced over the world (plain DDP); from then on only within this process's subgroup
//     (the topology's node: subgroup_size consecutive ranks, or the cluster's node), or not at
//     all with post_local_gradient_allreduce=false;
//   - the averager (strategies/averaging/), run after every optimizer step with warmup_steps =
//     start_local_sgd_iter: the periodic one over the world (model_averaging_period=P) or the
//     hierarchical one (model_averaging_periods=P1:G1,...,Pk:world).
// Both count the same windows: the hook synchronized backwards (one per accumulation window), the
// averager optimizer steps (one per window, a skipped AMP step included).
//
// Thread safety: run() on the autograd thread, everything else on the training thread (comm_hook.h).
#include <optional>
#include <vector>

#include "core/option_schema.h"
#include "strategies/averaging/hierarchical_model_averager.h"
#include "strategies/ddp/comm_hook.h"
#include "strategies/ddp/comm_hook_registry.h"

namespace volt::ddp {

struct PostLocalSGDOptions {
  // Synchronized iterations (optimizer steps) of plain DDP before the local phase; >= 0.
  int64_t start_local_sgd_iter = 1000;
  // In the local phase, all-reduce gradients within the subgroup (true) or not at all (false).
  bool post_local_gradient_allreduce = true;
  // Processes per subgroup (consecutive ranks), a divisor of the world size; unset: the processes
  // of one node (PyTorch's default subgroup).
  std::optional<int64_t> subgroup_size;
  // The periodic averager's period (>= 1) ...
  std::optional<int64_t> model_averaging_period;
  // ... or the hierarchical averager's levels, period:group_size, the last group size the world
  // size. Exactly one of the two.
  std::optional<std::vector<averaging::AveragingLevel>> model_averaging_periods;

  static const OptionSchema<PostLocalSGDOptions>& schema();
  // Also requires exactly one of model_averaging_period and model_averaging_periods.
  void validate() const;
  // The group sizes divide `world_size`; the hierarchy ends at it. Throws ConfigurationError.
  void check_world_size(int64_t world_size) const;
};

class PostLocalSGDHook : public CommHook {
 public:
  // `world` and `subgroup` (this process's group; may be the world) must outlive the hook.
  PostLocalSGDHook(Communicator& world, Communicator& subgroup, int64_t start_local_sgd_iter,
                   bool post_local_gradient_allreduce);
  std::string name() const override { return "post_local_sgd"; }
  CollectiveHandle run(GradBucket& bucket) override;  // [collective over the world, then the subgroup]

  // {"iteration"}: synchronized iterations seen, counted up to start_local_sgd_iter (PyTorch's
  // PostLocalSGDState.iter stops there too). The same on every rank.
  StateDict state_dict() const override;
  void load_state_dict(const StateDict& state) override;

  int64_t iteration() const { return iteration_; }

 private:
  AllReduceHook world_mean_, subgroup_mean_;
  int64_t subgroup_size_;
  int64_t start_;
  bool post_local_gradient_allreduce_;
  int64_t iteration_ = 0;
};

// The spec `comm_hook=post_local_sgd` stands for: the hook on the topology's node group (node size
// = options.subgroup_size) and the averager the options choose. Throws ConfigurationError for
// options validate() refuses.
std::shared_ptr<CommHookSpec> post_local_sgd_spec(const PostLocalSGDOptions& options);

// Registers `post_local_sgd` with its keys (comm_hook_registry.cpp).
void add_post_local_sgd_hook(CommHookRegistry& registry);

}  // namespace volt::ddp
