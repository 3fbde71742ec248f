#pragma once
// Note [The pipeline strategy]
// `--strategy pipeline[:stages=S,microbatches=M,schedule=1f1b|gpipe|interleaved_1f1b,virtual_stages=V]`:
// pipeline parallelism through the Trainer. The world is a process mesh `pp=S,dp=W/S` (Note [Process mesh]): the S
// ranks of a `pp` group run one batch together, each holding one stage of the model, and the
// W/S `dp` replicas take their shares of the data as DDP's ranks do.
//
// The module implements PipelineModel (pipeline_model.h): its layers as one Sequential, cut into
// S contiguous stages (balanced by parameter count, or the module's pipeline_split; under
// interleaved_1f1b S·V stages, rank s keeping stages s, s + S, ...), and the loss
// of the last layer's output (and any parameter a layer reads that another registers, Note
// [Parameters shared across stages]). Each rank keeps its stage and releases the rest (Note [A stage's
// share of the model]); its optimizers step only its stage's parameters (OSS over the `pp` group
// with the stages as the partition, no parameters gathered after the step), so parameters,
// gradients and optimizer state per rank are its stage's.
//
// A training step (run_step) cuts the batch into M equal micro-batches and runs the stage over
// them in the schedule's order (Note [Running a pipeline stage]): forwards in the precision's
// autocast, the loss on the last stage, backwards inside the step (Note [Backward inside the
// step]). The last stage's mean loss is broadcast over the `pp` group, so every rank returns it
// and rank 0 logs it ("pipeline/loss"). Then, as for every strategy, the Trainer's backward of
// that loss (divided by its accumulation window) finishes the stage's gradients and, outside
// no_sync(), averages them over the `dp` group. Clipping by norm runs over every stage (OSS over
// `pp`), so it clips by the model's global norm. With data_parallel=fsdp the replicas of a stage
// shard it instead (Note [A model part sharded over its replicas]), and its optimizers step the shards.
//
// Checkpoints are the whole model under its own names (Full): each stage's entries gathered to
// rank 0, the optimizers' state consolidated in PyTorch's layout, so `ddp` or `single_device`
// resume a pipeline's checkpoint and the pipeline resumes theirs. The module goes back whole at
// the end of a run (restore_module).
//
// Not supported, refused with the fix: validation, test and predict steps (run them under ddp
// on the checkpoint, or set limit_val_batches=0 and num_sanity_val_steps=0), a precision that
// scales losses (16-mixed; bf16-mixed needs no scaling), manual optimization, batches with extras
// (pipeline_loss sees the target only).
#include <memory>

#include "core/option_schema.h"
#include "core/registry.h"
#include "distributed/process_mesh.h"
#include "strategies/fsdp/shard_param_groups.h"
#include "strategies/mesh_replica_parts.h"
#include "strategies/parallel_strategy.h"
#include "strategies/pipeline/pipeline_gradients.h"
#include "strategies/pipeline/pipeline_model.h"
#include "strategies/pipeline/pipeline_schedule.h"
#include "strategies/pipeline/pipeline_stage.h"
#include "strategies/pipeline/shared_stage_parameters.h"
#include "strategies/pipeline/stage_gradient_window.h"
#include "strategies/pipeline/stage_ownership.h"
#include "strategies/replica_shards.h"

namespace volt {

struct PipelineOptions {
  int64_t stages = 0;        // ranks per pipeline; 0: every process (no data parallelism)
  int64_t microbatches = 4;  // each batch is cut into this many equal micro-batches
  pipeline::PipelineSchedule schedule = pipeline::PipelineSchedule::OneFOneB;
  int64_t virtual_stages = 1;  // chunks of the model each rank holds (interleaved_1f1b: >= 2)
  ReplicaDataParallel data_parallel = ReplicaDataParallel::DDP;

  static const OptionSchema<PipelineOptions>& schema();
  void validate() const { schema().validate(*this); }
};

// This rank's place in the pipeline, built by the strategy (the mesh at setup_environment, the
// rest at setup_module) and read by its parts when they act.
struct PipelineLayout {
  std::unique_ptr<ProcessMesh> mesh;                        // pp × dp
  // Interleaved: the pp ranks again, for the gradients (Note [Running a pipeline stage]).
  std::shared_ptr<Communicator> gradient_sends;
  std::unique_ptr<pipeline::StageOwnership> ownership;      // this rank's entries of the module
  std::map<const void*, int64_t> stage_of_parameter;        // every layer parameter's stage (its pp rank)
  std::unique_ptr<pipeline::SharedStageParameters> shared;  // parameters read by other stages (null: none)
  std::unique_ptr<ReplicaShards> shards;                    // data_parallel=fsdp: the stage's (else null)
};

class PipelineStrategy : public ParallelStrategy {
 public:
  explicit PipelineStrategy(PipelineOptions options = {});
  std::string name() const override { return "pipeline"; }
  const PipelineOptions& options() const { return options_; }
  void check_world_size(int64_t world_size) const override;

  void setup_environment(const StrategyEnvironment& environment) override;  // [collective]
  // ParallelStrategy's, and the copies of shared parameters are sent the stepped values before the
  // next forward.
  void after_optimizer_steps(int64_t global_step) override;
  // Wraps every optimizer in OSS over the `pp` group, stepping this rank's stage; with
  // data_parallel=fsdp, replaces the stage's parameters in them by this rank's shards.
  std::vector<std::shared_ptr<torch::optim::Optimizer>> setup_optimizers(
      std::vector<std::shared_ptr<torch::optim::Optimizer>> optimizers) override;
  // Runs the batch through the pipeline, backward included; returns the batch's mean loss on
  // every rank. Training only. [point to point within `pp`, a broadcast over it]
  torch::Tensor run_step(RunningStage stage, torch::nn::Module& module, const Batch& batch,
                         const StepFunction& step) override;
  void restore_module(torch::nn::Module& module) override;  // [collective]
  void teardown() override;
  // ParallelStrategy's, plus "pipeline/loss" (the last batch's mean loss, read when asked),
  // "pipeline/idle_fraction" (this stage's time waiting to receive in its last step) and
  // "pipeline/stage_parameter_bytes" (what this rank keeps of its stage's parameters between
  // steps: the whole stage, or its shards with data_parallel=fsdp).
  std::map<std::string, double> metrics() const override;

  // The `dp` group: gradients are averaged over the replicas of this rank's stage.
  Communicator& gradient_group() override;
  // Throws InternalError before setup_environment / setup_module.
  const ProcessMesh& mesh() const;
  pipeline::PipelineStage& stage() const;

 protected:
  void check_precision(const Precision& precision) const override;
  // Cuts the module into stages, keeps this rank's and releases the rest. [collective]
  void wrap_module(torch::nn::Module& module) override;

 private:
  // The parameters pipeline_shared_parameters() names that a stage other than their owner's
  // reads (null: none); throws ConfigurationError for a layer out of range or a parameter no layer
  // registers.
  std::unique_ptr<pipeline::SharedStageParameters> shared_across_stages(torch::nn::Module& module, size_t layer_count,
                                                                        const std::vector<int64_t>& starts) const;
  PipelineOptions options_;
  PipelineLayout layout_;
  pipeline::PipelineModel* model_ = nullptr;
  std::unique_ptr<pipeline::PipelineStage> stage_;
  pipeline::StageGradientWindow window_;
  torch::Tensor last_loss_;
  std::shared_ptr<PipelineGradients> gradients_;  // shared parts summed, the stage's averaged over `dp`
};

// Registers `pipeline` (strategy_registry.cpp).
void register_pipeline_strategy(Registry<Strategy>& registry);

}  // namespace volt
