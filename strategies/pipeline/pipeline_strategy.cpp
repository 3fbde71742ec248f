#include "strategies/pipeline/pipeline_strategy.h"

#include <algorithm>

#include "core/error.h"
#include "strategies/mesh_replica_parts.h"
#include "strategies/optimizer_sharding.h"
#include "strategies/pipeline/pipeline_checkpoint_state.h"
#include "strategies/pipeline/stage_split.h"
#include "strategies/sharded/oss.h"

namespace volt {

using pipeline::PipelineSchedule;

const OptionSchema<PipelineOptions>& PipelineOptions::schema() {
  static const auto schema =
      OptionSchema<PipelineOptions>("--strategy pipeline")
          .option("stages", &PipelineOptions::stages,
                  "ranks per pipeline, each holding one stage of the model; must divide the number of processes, "
                  "whose quotient is the number of data-parallel replicas (0: every process is a stage)",
                  at_least(int64_t{0}))
          .option("microbatches", &PipelineOptions::microbatches,
                  "equal micro-batches each batch is cut into (the batch size must be a multiple)",
                  at_least(int64_t{1}))
          .choice("schedule", &PipelineOptions::schedule,
                  {{"1f1b", PipelineSchedule::OneFOneB},
                   {"gpipe", PipelineSchedule::GPipe},
                   {"interleaved_1f1b", PipelineSchedule::Interleaved1F1B}},
                  "order of forwards and backwards: 1f1b (each stage holds at most S - s micro-batches), gpipe "
                  "(all forwards, then all backwards: M held) or interleaved_1f1b (virtual_stages chunks a rank: "
                  "the bubble that many times smaller; microbatches a multiple of stages)")
          .option("virtual_stages", &PipelineOptions::virtual_stages,
                  "chunks of the model each rank holds (interleaved_1f1b: 2 or more, the model cut into stages x "
                  "virtual_stages; the other schedules: 1)",
                  at_least(int64_t{1}))
          .choice("data_parallel", &PipelineOptions::data_parallel,
                  {{"ddp", ReplicaDataParallel::DDP}, {"fsdp", ReplicaDataParallel::FSDP}},
                  "how the data-parallel replicas of a stage share it: ddp (each holds the stage whole, gradients "
                  "averaged) or fsdp (each holds 1/replicas of its parameters, gradients and optimizer state, the "
                  "parameters gathered for each step)")
          .validated_by_what_it_builds();
  return schema;
}

PipelineStrategy::PipelineStrategy(PipelineOptions options)
    : options_(options), gradients_(std::make_shared<PipelineGradients>(*this, *this, layout_)) {
  options_.validate();
  hold(gradients_);
  hold(std::make_shared<ReplicaPlacement>(*this, layout_.mesh));
  hold(std::make_shared<PipelineCheckpointState>(*this, *this, layout_));
  hold(std::make_shared<OptimizerSharding>(name()));
}

void PipelineStrategy::check_world_size(int64_t world_size) const {
  model_parallel_size(name(), "stages", options_.stages, world_size);
}

void PipelineStrategy::check_precision(const Precision& precision) const {
  check<ConfigurationError>(
      !precision.scales_losses(), "--strategy pipeline: --precision ", precision.name(),
      " scales the loss, but a pipeline's backward runs inside its step, before the loss scale could "
      "reach it; use bf16-mixed (no loss scaling), bf16-true or 32-true");
}

void PipelineStrategy::setup_environment(const StrategyEnvironment& environment) {
  ParallelStrategy::setup_environment(environment);
  const int64_t world = communicator().size();
  const int64_t stages = model_parallel_size(name(), "stages", options_.stages, world);
  layout_.mesh = ProcessMesh::build(shared_communicator(),
                                    {{.name = "pp", .size = stages}, {.name = "dp", .size = world / stages}});
  // Checked here, where S is known, before any module is cut (and again by each step).
  pipeline::check_schedule_sizes(options_.schedule, stages, options_.microbatches, options_.virtual_stages);
  if (options_.virtual_stages > 1) {
    auto& pp = layout_.mesh->group("pp");
    std::vector<int64_t> every(static_cast<size_t>(pp.size()));
    for (int64_t r = 0; r < pp.size(); ++r) every[static_cast<size_t>(r)] = r;
    layout_.gradient_sends = pp.new_group(every);
  }
}

void PipelineStrategy::after_optimizer_steps(int64_t global_step) {
  ParallelStrategy::after_optimizer_steps(global_step);
  if (layout_.shared) layout_.shared->values_changed();
}

const ProcessMesh& PipelineStrategy::mesh() const {
  VOLT_INTERNAL_ASSERT(layout_.mesh != nullptr, "pipeline: the mesh is used before setup_environment");
  return *layout_.mesh;
}

pipeline::PipelineStage& PipelineStrategy::stage() const {
  VOLT_INTERNAL_ASSERT(stage_ != nullptr, "pipeline: the stage is used before setup_module");
  return *stage_;
}

Communicator& PipelineStrategy::gradient_group() { return mesh().group("dp"); }

void PipelineStrategy::wrap_module(torch::nn::Module& module) {
  ParallelStrategy::wrap_module(module);  // every rank starts from rank 0's model
  model_ = dynamic_cast<pipeline::PipelineModel*>(&module);
  check<ConfigurationError>(model_ != nullptr, "--strategy pipeline: the module does not implement ",
                            "volt::pipeline::PipelineModel, so it cannot be cut into stages; derive from it beside ",
                            "volt::Module and return the model's layers from pipeline_layers() and the loss of their "
                            "output from pipeline_loss() (docs/pipeline.md)");
  auto layers = model_->pipeline_layers();
  check<ConfigurationError>(!layers.is_empty() && !layers->is_empty(), "--strategy pipeline: pipeline_layers() ",
                            "returned no layers; return the Sequential the model runs, registered in the module");
  std::set<const void*> in_layers;
  for (const auto& p : layers->parameters()) in_layers.insert(p.unsafeGetTensorImpl());
  for (const auto& item : module.named_parameters()) {
    check<ConfigurationError>(in_layers.count(item.value().unsafeGetTensorImpl()) > 0,
                              "--strategy pipeline: ", "parameter '", item.key(),
                              "' is in none of pipeline_layers(), so no stage would ",
                              "hold it; put every layer the model runs into that Sequential");
  }
  const auto& m = mesh();
  const int64_t ranks = m.size("pp"), chunks = options_.virtual_stages;
  const int64_t stages = ranks * chunks;  // global stage g runs on pp rank g % ranks
  check<ConfigurationError>(chunks == 1 || stages <= static_cast<int64_t>(layers->size()), "--strategy pipeline: ",
                            "stages=", ranks, " x virtual_stages=", chunks, " makes ", stages, " stages, but ",
                            "pipeline_layers() has ", layers->size(), " entries; use fewer virtual_stages, or split ",
                            "the model into more layers");
  auto starts = model_->pipeline_split(stages);
  if (starts.empty()) {
    starts = pipeline::balanced_stage_starts(pipeline::entry_parameter_counts(layers), stages);
  } else {
    check<ConfigurationError>(static_cast<int64_t>(starts.size()) == stages, "--strategy pipeline: ", "pipeline_split(",
                              stages, ") returned ", starts.size(), " stage starts; return one ",
                              "per stage (the first entry of each), or none for a split balanced by parameters");
    pipeline::check_stage_starts(starts, static_cast<int64_t>(layers->size()));
  }
  layout_.stage_of_parameter.clear();
  for (int64_t g = 0; g < stages; ++g) {
    for (const auto& p : pipeline::stage_of(layers, starts, g)->parameters())
      layout_.stage_of_parameter[p.unsafeGetTensorImpl()] = g % ranks;
  }
  const int64_t mine = m.coordinate("pp");
  // This rank's chunks (global stages mine, mine + S, ...), and all their entries as one Sequential
  // for what the rank keeps.
  std::vector<torch::nn::Sequential> chunk_modules;
  torch::nn::Sequential stage_module;
  for (int64_t v = 0; v < chunks; ++v) {
    chunk_modules.push_back(pipeline::stage_of(layers, starts, v * ranks + mine));
    for (const auto& entry : *chunk_modules.back()) stage_module->push_back(entry);
  }
  layout_.shared = shared_across_stages(module, layers->size(), starts);
  layout_.ownership = std::make_unique<pipeline::StageOwnership>(
      module, layers, stage_module, mine == 0,
      layout_.shared ? layout_.shared->copies() : std::vector<torch::Tensor>{});
  layout_.ownership->release();
  if (options_.data_parallel == ReplicaDataParallel::FSDP) {
    std::vector<std::pair<std::string, torch::Tensor>> owned;
    for (const auto& item : module.named_parameters()) {
      if (layout_.ownership->owns(item.value())) owned.emplace_back(item.key(), item.value());
    }
    layout_.shards =
        std::make_unique<ReplicaShards>(std::move(owned), m.group("dp"), "pipeline stage " + std::to_string(mine));
  }
  if (layout_.gradient_sends) {
    stage_ = std::make_unique<pipeline::PipelineStage>(chunk_modules, m.group("pp"), *layout_.gradient_sends,
                                                       root_device());
  } else {
    stage_ = std::make_unique<pipeline::PipelineStage>(stage_module, m.group("pp"), root_device());
  }
  gradients_->attach(&module);
}

std::unique_ptr<pipeline::SharedStageParameters> PipelineStrategy::shared_across_stages(
    torch::nn::Module& module, size_t layer_count, const std::vector<int64_t>& starts) const {
  const int64_t ranks = mesh().size("pp");
  const auto stage_of_layer = [&](int64_t layer) {  // the pp rank running it
    return (static_cast<int64_t>(std::upper_bound(starts.begin(), starts.end(), layer) - starts.begin()) - 1) % ranks;
  };
  std::vector<pipeline::SharedStageParameters::Shared> shared;
  for (const auto& read : model_->pipeline_shared_parameters()) {
    check<ConfigurationError>(read.layer >= 0 && read.layer < static_cast<int64_t>(layer_count),
                              "--strategy pipeline: pipeline_shared_parameters() names layer ", read.layer, " of the ",
                              layer_count, " pipeline_layers(); give the index of the layer that reads the parameter");
    const auto owner = layout_.stage_of_parameter.find(read.parameter.unsafeGetTensorImpl());
    check<ConfigurationError>(owner != layout_.stage_of_parameter.end(), "--strategy pipeline: a parameter that ",
                              "layer ", read.layer, " reads (pipeline_shared_parameters()) is registered in none of ",
                              "pipeline_layers(); register it in the layer that owns it");
    const int64_t reader = stage_of_layer(read.layer);
    if (reader == owner->second) continue;
    auto same = std::find_if(shared.begin(), shared.end(), [&](const auto& s) {
      return s.parameter.unsafeGetTensorImpl() == read.parameter.unsafeGetTensorImpl();
    });
    if (same == shared.end()) {
      std::string name;
      for (const auto& item : module.named_parameters()) {
        if (item.value().unsafeGetTensorImpl() == read.parameter.unsafeGetTensorImpl()) name = item.key();
      }
      shared.push_back({.parameter = read.parameter, .name = name, .stages = {owner->second}, .owner = owner->second});
      same = std::prev(shared.end());
    }
    if (std::find(same->stages.begin(), same->stages.end(), reader) == same->stages.end()) {
      same->stages.push_back(reader);
      std::sort(same->stages.begin(), same->stages.end());
    }
  }
  if (shared.empty()) return nullptr;
  return std::make_unique<pipeline::SharedStageParameters>(std::move(shared), mesh().group("pp"));
}

std::vector<std::shared_ptr<torch::optim::Optimizer>> PipelineStrategy::setup_optimizers(
    std::vector<std::shared_ptr<torch::optim::Optimizer>> optimizers) {
  VOLT_INTERNAL_ASSERT(stage_ != nullptr, "pipeline: setup_optimizers runs after setup_module");
  if (layout_.shards) {
    // The other stages' parameters stay in the groups, released: they get no gradient here, so
    // they are never stepped (and the copies of shared ones lose theirs once summed).
    layout_.shards->take_optimizers(optimizers, "--strategy pipeline");
    return optimizers;
  }
  OSSOptions oss;
  oss.gather_parameters = false;
  oss.partition = [this](const std::vector<std::vector<torch::Tensor>>& groups, int64_t world_size) {
    return partition_by_owner(groups, world_size, [this](const torch::Tensor& p) {
      auto found = layout_.stage_of_parameter.find(p.unsafeGetTensorImpl());
      return found == layout_.stage_of_parameter.end() ? int64_t{-1} : found->second;
    });
  };
  for (auto& optimizer : optimizers) optimizer = OSS::wrap(optimizer, mesh().group("pp"), oss);
  return optimizers;
}

torch::Tensor PipelineStrategy::run_step(RunningStage running, torch::nn::Module& module, const Batch& batch,
                                         const StepFunction& step) {
  check<NotSupportedError>(running == RunningStage::Training, "--strategy pipeline: runs training steps only, and ",
                           "the Trainer asked for a step to ", to_string(running), " (validation_step, test_step and ",
                           "predict_step need the whole model, which no rank holds); set --limit-val-batches 0 ",
                           "--num-sanity-val-steps 0 and evaluate the checkpoint under ddp or single_device");
  check<ConfigurationError>(!window_.open(), "--strategy pipeline: the last step's loss never ran backward; the ",
                            "pipeline runs its step itself and needs automatic optimization (manual optimization's ",
                            "training_step is not called under pipeline)");
  auto& s = stage();
  const int64_t m = options_.microbatches;
  check<ConfigurationError>(batch.size() % m == 0, "--strategy pipeline: a batch of ", batch.size(), " samples does ",
                            "not divide into microbatches=", m, "; choose a batch size that is a multiple of it ",
                            "(drop_last=true for a short last batch) or microbatches that divide it");
  check<ConfigurationError>(batch.extras.empty(), "--strategy pipeline: the batch has extras (",
                            batch.extras.begin()->first, ", ...), which pipeline_loss cannot see; put what the loss ",
                            "needs into the target");
  check<ConfigurationError>(!s.is_last() || batch.target.defined(), "--strategy pipeline: the batch has no target ",
                            "for pipeline_loss on the last stage");
  const int64_t rows = batch.size() / m;
  std::vector<torch::Tensor> inputs, targets;
  if (s.is_first()) inputs = batch.input.split(rows);
  if (s.is_last()) targets = batch.target.split(rows);
  if (layout_.shards) layout_.shards->gather();          // kept for every micro-batch of the step
  if (layout_.shared) layout_.shared->refresh_copies();  // if the owners stepped them since
  auto parameters = s.parameters();
  if (layout_.shared) {
    for (const auto& copy : layout_.shared->copies()) parameters.push_back(copy);  // their gradients too
  }
  window_.begin_step(std::move(parameters));
  const auto loss = s.run(
      options_.schedule, m, inputs, targets,
      [this](const torch::Tensor& output, const torch::Tensor& target) {
        return model_->pipeline_loss(output, target);
      },
      [this] { return placement().forward_context(RunningStage::Training); });
  // The last stage's mean loss to every stage: each rank returns it and rank 0 logs it.
  auto value = s.is_last() ? loss.detach().to(torch::kFloat).reshape({}).clone()
                           : torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat).device(root_device()));
  mesh().group("pp").broadcast(value, s.stages() - 1);
  last_loss_ = value;
  return window_.carrying_loss(value);
}

void PipelineStrategy::restore_module(torch::nn::Module& module) {
  if (layout_.shards) {
    layout_.shards->restore();
    layout_.shards.reset();
  }
  if (!layout_.ownership) return;
  // Every rank gathers, even one that released nothing (a rank holding every parameter, beside a
  // rank whose stages have none): the gather is a collective.
  const auto whole = checkpointing().full_model_state_dict(module);
  if (layout_.ownership->released()) layout_.ownership->restore(whole);
}

void PipelineStrategy::teardown() {
  gradients_->attach(nullptr);
  stage_.reset();
  layout_.ownership.reset();
  layout_.shared.reset();
  layout_.shards.reset();
  layout_.stage_of_parameter.clear();
  model_ = nullptr;
  last_loss_ = torch::Tensor();
  ParallelStrategy::teardown();
}

std::map<std::string, double> PipelineStrategy::metrics() const {
  auto values = ParallelStrategy::metrics();
  if (last_loss_.defined()) values["pipeline/loss"] = last_loss_.item<double>();
  if (stage_) values["pipeline/idle_fraction"] = stage_->last_step().idle_fraction();
  if (stage_) {
    // Live tensors: the shards' storage with data_parallel=fsdp, else the stage's parameters.
    int64_t bytes = 0;
    for (const auto& p : layout_.shards ? layout_.shards->flat().stepped_tensors() : stage_->parameters())
      bytes += p.numel() * static_cast<int64_t>(p.element_size());
    values["pipeline/stage_parameter_bytes"] = static_cast<double>(bytes);
  }
  return values;
}

void register_pipeline_strategy(Registry<Strategy>& registry) {
  registry.add("pipeline",
               "pipeline parallelism: the model cut into stages, one per rank (or several: interleaved 1F1B), "
               "micro-batches through them (GPipe, 1F1B or interleaved 1F1B), data parallel across pipelines (ddp or "
               "fsdp)",
               PipelineOptions::schema(),
               [](const PipelineOptions& options) { return std::make_shared<PipelineStrategy>(options); });
}

}  // namespace volt
