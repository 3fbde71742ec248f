#pragma once
// Note [The tensor_parallel strategy]
// `--strategy tensor_parallel:tp=T,plan=PLAN`: tensor parallelism through the Trainer (Megatron-LM;
// PyTorch's parallelize_module with ColwiseParallel / RowwiseParallel). The processes form a mesh
// `dp=N/T,tp=T` (Note [Process mesh]; tp innermost, so a tp group is consecutive ranks, on one
// node): the T ranks of a `tp` group run one batch together, each holding its slice of every
// linear or embedding the plan names (tensor_parallel_plan.h, Note [A module split across a
// group]); the N/T replicas take their shares of the data and average their gradients over `dp` (DDP's mean).
//
// While a step runs, the `tp` group is the active one (ActiveTensorParallelGroup), which
// volt::tp::cross_entropy (parallel_cross_entropy.h) takes the loss over a colwise head's
// vocabulary slices with.
//
// A planned module must be called through volt::call or be an entry of a Sequential (which the
// strategy routes through it): LibTorch has no forward hooks, so a direct `fc->forward(x)` would
// run the slice as if it were whole. After the first training step a planned module whose split
// forward never ran is an error naming it. Parameters the plan does not name stay whole and equal
// on the ranks of a group (their gradients are the same there: every rank ends with the summed
// output of a rowwise linear).
//
// Checkpoints are the whole model (Full): each split parameter gathered over its group, and its
// optimizer's per-element state with it, in PyTorch's layout, so any strategy at any world size
// loads it; a load cuts each rank's slice out. The module is whole again after a successful run.
// Clipping by norm clips by the whole model's norm (tensor_parallel_gradients.h).
// With data_parallel=fsdp the replicas of a rank's slices (its `dp` group) shard them (Note [A model
// part sharded over its replicas]): fsdp over `dp` with tensor parallelism over `tp`, Lightning's
// ModelParallelStrategy's 2-D layout. Not built: sequence parallelism.
#include <memory>
#include <unordered_map>
#include <vector>

#include "core/option_schema.h"
#include "core/registry.h"
#include "distributed/process_mesh.h"
#include "nn/module_call.h"
#include "strategies/fsdp/shard_param_groups.h"
#include "strategies/mesh_replica_parts.h"
#include "strategies/parallel_strategy.h"
#include "strategies/replica_shards.h"
#include "strategies/tensor_parallel/split_module.h"
#include "strategies/tensor_parallel/tensor_parallel_gradients.h"

namespace volt {

struct TensorParallelOptions {
  int64_t tp = 0;    // ranks per tensor-parallel group; 0: every process
  std::string plan;  // "path:colwise|path:rowwise" (tensor_parallel_plan.h)
  ReplicaDataParallel data_parallel = ReplicaDataParallel::DDP;

  static const OptionSchema<TensorParallelOptions>& schema();
  void validate() const { schema().validate(*this); }
};

// What the strategy built for this run: the mesh (setup_environment) and the split linears
// (setup_module), read by its parts when they act.
class TensorParallelLayout {
 public:
  std::unique_ptr<ProcessMesh> mesh;         // dp × tp
  std::unique_ptr<ReplicaShards> shards;     // data_parallel=fsdp: this rank's part, sharded over dp (else null)

  // The plan's modules, in module order.
  const std::vector<std::shared_ptr<tp::SplitModule>>& splits() const { return splits_; }
  void add(std::shared_ptr<tp::SplitModule> split);
  void clear_splits();
  // The split module that holds `parameter` split, or null (a whole parameter, or every one once
  // restored). Checkpoint loops ask it for each parameter: a lookup, not a search.
  const tp::SplitModule* split_of(const torch::Tensor& parameter) const;

 private:
  std::vector<std::shared_ptr<tp::SplitModule>> splits_;
  std::unordered_map<const c10::TensorImpl*, const tp::SplitModule*> split_by_parameter_;
};

class TensorParallelStrategy : public ParallelStrategy {
 public:
  explicit TensorParallelStrategy(TensorParallelOptions options = {});
  std::string name() const override { return "tensor_parallel"; }
  const TensorParallelOptions& options() const { return options_; }
  void check_world_size(int64_t world_size) const override;

  void setup_environment(const StrategyEnvironment& environment) override;  // [collective]
  // data_parallel=fsdp: replaces the parameters in the optimizers by this rank's shards.
  std::vector<std::shared_ptr<torch::optim::Optimizer>> setup_optimizers(
      std::vector<std::shared_ptr<torch::optim::Optimizer>> optimizers) override;
  // The step (its parameters gathered first with data_parallel=fsdp), then (once) that every
  // planned module's split forward ran.
  torch::Tensor run_step(RunningStage stage, torch::nn::Module& module, const Batch& batch,
                         const StepFunction& step) override;
  void restore_module(torch::nn::Module& module) override;  // [collective]
  void teardown() override;
  // ParallelStrategy's, plus "tensor_parallel/parameter_bytes": what this rank keeps of the
  // model's parameters between steps (its slices and the whole parameters, or its shards of them
  // with data_parallel=fsdp), from live tensors.
  std::map<std::string, double> metrics() const override;

  // The `dp` group: gradients are averaged over the replicas of this rank's slices.
  Communicator& gradient_group() override;
  const ProcessMesh& mesh() const;  // throws InternalError before setup_environment
  const TensorParallelLayout& layout() const { return layout_; }

 protected:
  // Splits the planned linears and embeddings. [collective]
  void wrap_module(torch::nn::Module& module) override;

 private:
  // Throws ConfigurationError naming the first planned module whose split forward has not run
  // since setup_module, with `failure` (what the step threw, if it did) appended.
  void check_split_forwards_ran(const std::string& failure) const;

  TensorParallelOptions options_;
  std::vector<tp::PlanEntry> plan_;
  TensorParallelLayout layout_;
  std::vector<RoutedEntry> routed_;  // Sequential entries routed through their wrappers
  std::vector<std::pair<torch::nn::Module*, std::shared_ptr<tp::SplitModule>>> wrapped_;
  std::vector<int64_t> calls_before_;  // per split module, its wrapper's calls at setup_module
  bool reach_checked_ = false;
  torch::nn::Module* module_ = nullptr;  // the split module, setup_module to teardown
  std::shared_ptr<TensorParallelGradients> gradients_;
};

// Registers `tensor_parallel` (strategy_registry.cpp).
void register_tensor_parallel_strategy(Registry<Strategy>& registry);

}  // namespace volt
