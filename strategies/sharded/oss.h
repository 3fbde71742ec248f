#pragma once
// Optimizer state sharding, OSS (fairscale's name) / ZeRO stage 1 (Rajbhandari et al., "ZeRO:
// Memory Optimizations Toward Training Trillion Parameter Models", SC'20): every rank keeps the
// optimizer state of its shard of the parameters only (partition.h), steps that shard, and then
// the owners' updated parameters are all-gathered, so that all ranks continue with the same model.
// PyTorch's ZeroRedundancyOptimizer is the same idea, and with the same gradients (DDP's) it
// trains bitwise like the unsharded optimizer, as this does.
//
// OSS is a torch::optim::Optimizer over *every* parameter: its param groups (and their options,
// which LR schedulers and the LearningRateMonitor change) are the whole model's, its step()
// is a collective:
//   1. copy each group's options into the local optimizer (what schedulers changed reaches it);
//   2. the local optimizer steps this rank's shard;
//   3. one all-gather of the owners' parameters, in place in the buffers they live in, laid out
//      by owner (Note [Owner-ordered parameter buffers]; in float16 with broadcast_fp16).
// The partitioned parameters are views into those buffers while the OSS lives (set_data: the
// module's members and other holders keep the same tensors).
// The local optimizer is any torch::optim::Optimizer (made by a factory over this rank's groups,
// as fairscale's OSS(params, optim=SGD, lr=...)); OSS::wrap turns an optimizer the user built over
// all parameters into the local one, restricted to the shard.
//
// Methods marked [collective] must be called by every rank. Not thread-safe.
#include <torch/torch.h>

#include <functional>
#include <map>
#include <memory>

#include "distributed/communicator.h"
#include "strategies/sharded/owner_buffers.h"
#include "strategies/sharded/partition.h"
#include "strategies/sharded_optimizer.h"

namespace volt {

struct OSSOptions {
  // Send updated parameters in float16 (half the bytes); every rank, the owner too, then
  // holds the float16-rounded values, so the ranks stay identical. For mixed-precision training,
  // where the model tolerates it (fairscale's broadcast_fp16).
  bool broadcast_fp16 = false;
  // Who owns which parameter; unset: partition_parameters (balanced by elements). A strategy
  // whose parameters already live apart sets it (the pipeline: each stage owns its own).
  std::function<Partition(const std::vector<std::vector<torch::Tensor>>& groups, int64_t world_size)> partition;
  // After the step, all-gather the owners' parameters so that every rank holds the whole model.
  // False where the other ranks never use them (a pipeline stage holds only its own): the step
  // is then local, and the parameters stay where they are.
  bool gather_parameters = true;
};

class OSS : public torch::optim::Optimizer, public ShardedOptimizer {
 public:
  // Makes this rank's local optimizer over `groups` (this rank's shard of each group, in group
  // order, each with the wrapper group's options; a group may be empty).
  using LocalFactory =
      std::function<std::shared_ptr<torch::optim::Optimizer>(std::vector<torch::optim::OptimizerParamGroup> groups)>;

  // `groups`: every parameter, in the groups the optimizer should have; `defaults`: the options of
  // a group given without its own. `communicator` must outlive the OSS. [collective: none at
  // construction; every rank must build the same groups]
  OSS(std::vector<torch::optim::OptimizerParamGroup> groups, std::unique_ptr<torch::optim::OptimizerOptions> defaults,
      LocalFactory make_local, Communicator& communicator, OSSOptions options = {});
  // Shards `optimizer`, built over every parameter and not stepped yet (its state is empty): OSS
  // takes its groups and options, and `optimizer` becomes the local optimizer of this rank's
  // shard. Works for any optimizer class. Throws ConfigurationError when it has state.
  static std::shared_ptr<OSS> wrap(std::shared_ptr<torch::optim::Optimizer> optimizer, Communicator& communicator,
                                   OSSOptions options = {});

  // Steps this rank's shard and all-gathers every owner's parameters. Repartitions first when the
  // set of parameters requiring grad changed since the last step (the state moves with its
  // parameters). [collective]
  torch::Tensor step(LossClosure closure = nullptr) override;

  const Partition& partition() const { return partition_; }
  // The rank that owns `parameter` (-1: it does not require grad, or is not one of this OSS's).
  int64_t owner_of(const torch::Tensor& parameter) const;
  torch::optim::Optimizer& local() const { return *local_; }
  Communicator& communicator() const { return communicator_; }

  // ShardedOptimizer
  StateDict consolidated_state_dict(int64_t root = 0) override;  // [collective]
  StateDict shard_state_dict() const override;
  void load_sharded_or_consolidated_state_dict(const StateDict& state, const std::string& what,
                                               const ParameterNamer& name_of) override;
  torch::Tensor clip_grad_norm(double max_norm, double norm_type) override;  // [collective]

 private:
  std::vector<std::vector<torch::Tensor>> group_parameters() const;
  // (Re)computes the partition, lays the parameters out by owner and gives the local optimizer
  // this rank's groups.
  void repartition();
  void sync_options_to_local();
  // This rank's state in PyTorch's layout, keyed by global parameter index, with the wrapper's
  // param groups; throws NotSupportedError for an optimizer class without a state codec.
  StateDict state_with_global_indices() const;

  LocalFactory make_local_;
  Communicator& communicator_;
  OSSOptions options_;
  Partition partition_;
  std::vector<bool> trainable_;  // per parameter (flat), when the partition was made
  std::map<const void*, int64_t> owner_;  // TensorImpl → rank
  std::shared_ptr<torch::optim::Optimizer> local_;
  std::unique_ptr<OwnerBuffers> buffers_;  // the partitioned parameters live here (gather_parameters)
};

}  // namespace volt
