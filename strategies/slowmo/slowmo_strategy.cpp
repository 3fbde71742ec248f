#include "strategies/slowmo/slowmo_strategy.h"

#include <unordered_map>

#include "core/error.h"
#include "strategies/shared_strategy_options.h"
#include "core/warning.h"

namespace volt {

const OptionSchema<SlowMoOptions>& SlowMoOptions::schema() {
  static const auto schema =
      OptionSchema<SlowMoOptions>("--strategy slowmo")
          .option("slowmo_momentum", &SlowMoOptions::slowmo_momentum,
                  "slow momentum β (0 with slowmo_lr=1: no slow "
                  "momentum, plain local SGD)",
                  at_least(0.0))
          .option("slowmo_lr", &SlowMoOptions::slowmo_lr, "slow learning rate α", greater_than(0.0))
          .option("slowmo_frequency", &SlowMoOptions::slowmo_frequency,
                  "optimizer steps between slow momentum steps (a multiple of localsgd_frequency)",
                  at_least(int64_t{1}))
          .option("localsgd_frequency", &SlowMoOptions::localsgd_frequency,
                  "optimizer steps between averages of the models across nodes", at_least(int64_t{1}))
          .with(nprocs_per_node_option(&SlowMoOptions::nprocs_per_node))
          .option("memory_efficient", &SlowMoOptions::memory_efficient,
                  "shard the slow momentum buffers (x_old, u) across ranks: 2/shards of the model per rank, not 2x")
          .alias("slowmo_memory_efficient")  // fairscale's name
          .option("num_shards", &SlowMoOptions::num_shards,
                  "shards of the slow momentum buffers with memory_efficient (at most the world size)",
                  at_least(int64_t{1}))
          .alias("slowmo_num_shards")  // fairscale's name
          .with(broadcast_buffers_option(&SlowMoOptions::broadcast_buffers, " (over the world, as fairscale)"))
          .with(ddp_bucket_cap_mb_option(&SlowMoOptions::bucket_cap_mb, " within the node"))
          .option("find_unused_parameters", &SlowMoOptions::find_unused_parameters,
                  "search the autograd graph for parameters that get no gradient")
          .validated_by_what_it_builds();  // the strategy's constructor validates (users build it from a struct too)
  return schema;
}

void SlowMoOptions::validate() const {
  schema().validate(*this);
  averaging().validate(schema().owner());
}

averaging::SlowMomentumOptions SlowMoOptions::averaging() const {
  return {.momentum = slowmo_momentum,
          .lr = slowmo_lr,
          .slowmo_frequency = slowmo_frequency,
          .localsgd_frequency = localsgd_frequency,
          .memory_efficient = memory_efficient,
          .num_shards = num_shards};
}

DDPOptions SlowMoOptions::ddp() const {
  DDPOptions options;
  options.bucket_cap_mb = bucket_cap_mb;
  options.find_unused_parameters = find_unused_parameters;
  options.broadcast_buffers = broadcast_buffers;
  return options;
}

SlowMoStrategy::SlowMoStrategy(SlowMoOptions options) : DDPStrategy(options.ddp()), options_(std::move(options)) {
  options_.validate();
}

void SlowMoStrategy::check_world_size(int64_t world_size) const {
  check_nprocs_per_node(world_size, options_.nprocs_per_node, "--strategy slowmo");
}

Communicator& SlowMoStrategy::gradient_group() { return build_topology(options_.nprocs_per_node).node(); }

void SlowMoStrategy::wrap_module(torch::nn::Module& module) {
  DDPStrategy::wrap_module(module);  // the reducer on the node group (gradient_group)
  const auto& topology = node_topology();
  auto averager = std::make_unique<averaging::SlowMomentumAverager>(node_topology(), options_.averaging(),
                                                                    [this] { return learning_rates(); });
  averager->check_parameters(reducer().parameters());
  averager_ = averager.get();
  set_model_averager(std::move(averager));
  if (topology.num_nodes() == 1 && is_global_zero()) {
    warn("--strategy slowmo: all " + std::to_string(topology.world_size()) + " processes are on one node (" +
         std::to_string(topology.node_size()) +
         " per node), so gradients are averaged over all of them every "
         "step and local SGD is off" +
         (options_.averaging().slow_momentum()
              ? "; the slow momentum step still runs every " + std::to_string(options_.slowmo_frequency) + " steps"
              : "") +
         ". Set nprocs_per_node to simulate several nodes, or run on several");
  }
}

void SlowMoStrategy::check_precision(const Precision& precision) const {
  DDPStrategy::check_precision(precision);
  const auto dtype = precision.parameter_dtype();
  check<ConfigurationError>(
      !options_.averaging().slow_momentum() || (dtype != torch::kHalf && dtype != torch::kBFloat16),
      "--strategy slowmo: --precision ", precision.name(), " keeps the parameters in ", c10::toString(dtype),
      ", and the slow momentum buffers with them, which loses the slow "
      "momentum update; use 32-true or a mixed precision (16-mixed, bf16-mixed)");
}

bool SlowMoStrategy::optimizer_step(torch::optim::Optimizer& optimizer,
                                    const std::function<void(torch::optim::Optimizer&)>& before_step) {
  // Refused before the first step; x_old itself is taken after it (Note [x_old after the first step]).
  if (!averager().initialized()) averager().check_parameters(reducer().parameters());
  return DDPStrategy::optimizer_step(optimizer, before_step);
}

std::vector<double> SlowMoStrategy::learning_rates() const {
  std::unordered_map<const void*, double> rate_of;
  for (const auto& optimizer : optimizers()) {
    for (auto& group : optimizer->param_groups()) {
      const double lr = group.options().get_lr();
      for (const auto& p : group.params()) rate_of.emplace(p.unsafeGetTensorImpl(), lr);
    }
  }
  std::vector<double> rates;
  for (const auto& p : reducer().parameters()) {
    const auto found = rate_of.find(p.unsafeGetTensorImpl());
    rates.push_back(found == rate_of.end() ? 1.0 : found->second);
  }
  return rates;
}

void SlowMoStrategy::teardown() {
  averager_ = nullptr;  // DDPStrategy::teardown destroys it
  DDPStrategy::teardown();
}

std::map<std::string, double> SlowMoStrategy::metrics() const {
  auto metrics = DDPStrategy::metrics();
  if (averager_) metrics["slowmo/buffer_bytes"] = static_cast<double>(averager_->buffer_bytes());
  return metrics;
}

averaging::SlowMomentumAverager& SlowMoStrategy::averager() const {
  VOLT_INTERNAL_ASSERT(averager_ != nullptr, "slowmo: the averager is used before setup_module()");
  return *averager_;
}

void register_slowmo_strategy(Registry<Strategy>& registry) {
  registry.add("slowmo",
               "SlowMo: DDP within each node, models averaged across nodes every localsgd_frequency steps, slow "
               "momentum every slowmo_frequency steps",
               SlowMoOptions::schema(),
               [](const SlowMoOptions& options) { return std::make_shared<SlowMoStrategy>(options); });
}

}  // namespace volt
