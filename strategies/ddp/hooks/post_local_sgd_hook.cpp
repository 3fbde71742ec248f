#include "strategies/ddp/hooks/post_local_sgd_hook.h"

#include "core/error.h"
#include "strategies/averaging/periodic_model_averager.h"

namespace volt::ddp {

const OptionSchema<PostLocalSGDOptions>& PostLocalSGDOptions::schema() {
  using averaging::AveragingLevel;
  static const auto schema =
      OptionSchema<PostLocalSGDOptions>("--strategy ddp:comm_hook=post_local_sgd")
          .option("start_local_sgd_iter", &PostLocalSGDOptions::start_local_sgd_iter,
                  "optimizer steps of plain DDP (gradients all-reduced over the world) before the local phase",
                  at_least(int64_t{0}))
          .alias("start_localSGD_iter")  // PyTorch's and Lightning's spelling
          .option("post_local_gradient_allreduce", &PostLocalSGDOptions::post_local_gradient_allreduce,
                  "in the local phase, all-reduce gradients within the subgroup (false: not at all)")
          .option("subgroup_size", &PostLocalSGDOptions::subgroup_size,
                  "processes per subgroup, consecutive ranks, a divisor of the world size (unset: one node's "
                  "processes); also simulates nodes of that size",
                  at_least(int64_t{1}))
          .option("model_averaging_period", &PostLocalSGDOptions::model_averaging_period,
                  "average the models over the world every this many optimizer steps (periodic averager)",
                  at_least(int64_t{1}))
          .option("model_averaging_periods", &PostLocalSGDOptions::model_averaging_periods,
                  TextForm<std::vector<AveragingLevel>>{"period:group_size,... (e.g. 2:4,8:8)",
                                                        averaging::parse_averaging_levels,
                                                        averaging::format_averaging_levels},
                  "hierarchical averager: groups of group_size consecutive ranks average every period steps; "
                  "the last group size is the world size (instead of model_averaging_period)");
  return schema;
}

void PostLocalSGDOptions::validate() const {
  schema().validate(*this);
  const std::string owner = schema().owner();
  check<ConfigurationError>(model_averaging_period || model_averaging_periods, owner, ": expected "
                            "model_averaging_period=P (average the models over the world every P steps) or "
                            "model_averaging_periods=P1:G1,...,Pk:<world size> (hierarchical), got neither; without "
                            "averaging the subgroups' models drift apart for good after start_local_sgd_iter");
  if (!model_averaging_periods) return;
  check<ConfigurationError>(!model_averaging_period, owner, ": expected one of model_averaging_period (periodic) "
                            "and model_averaging_periods (hierarchical), got both (",
                            model_averaging_period.value_or(0), " and '",
                            averaging::format_averaging_levels(*model_averaging_periods), "'); keep one");
  try {
    averaging::check_averaging_levels(*model_averaging_periods);
  } catch (const ConfigurationError& e) {
    throw ConfigurationError(owner + ": " + e.what());
  }
}

void PostLocalSGDOptions::check_world_size(int64_t world_size) const {
  const std::string owner = schema().owner();
  if (subgroup_size) {
    check<ConfigurationError>(world_size % *subgroup_size == 0, owner, ": expected a subgroup_size that divides the "
                              "world size ", world_size, ", got ", *subgroup_size, "; choose one of the divisors of ",
                              world_size);
  }
  if (model_averaging_periods) {
    try {
      averaging::check_averaging_levels(*model_averaging_periods, world_size);
    } catch (const ConfigurationError& e) {
      throw ConfigurationError(owner + ": " + e.what());
    }
  }
}

PostLocalSGDHook::PostLocalSGDHook(Communicator& world, Communicator& subgroup, int64_t start_local_sgd_iter,
                                   bool post_local_gradient_allreduce)
    : world_mean_(world),
      subgroup_mean_(subgroup),
      subgroup_size_(subgroup.size()),
      start_(start_local_sgd_iter),
      post_local_gradient_allreduce_(post_local_gradient_allreduce) {
  check<ConfigurationError>(start_local_sgd_iter >= 0, "post_local_sgd: expected start_local_sgd_iter >= 0, got ",
                            start_local_sgd_iter);
}

CollectiveHandle PostLocalSGDHook::run(GradBucket& bucket) {
  if (iteration_ < start_) {
    // Every bucket of an iteration sees the same count; it advances with the last one.
    if (bucket.is_last) ++iteration_;
    return world_mean_.run(bucket);
  }
  // A completed handle without a result: the Reducer keeps the bucket as it is, this rank's own
  // gradient (the mean over a subgroup of one is that too, without a collective).
  if (!post_local_gradient_allreduce_ || subgroup_size_ == 1) return {};
  return subgroup_mean_.run(bucket);
}

StateDict PostLocalSGDHook::state_dict() const {
  StateDict state;
  state.set("iteration", iteration_);
  return state;
}

void PostLocalSGDHook::load_state_dict(const StateDict& state) {
  const int64_t iteration = state.get_int("iteration");
  check<CheckpointError>(iteration >= 0, "post_local_sgd: expected an iteration >= 0 in the checkpoint, got ",
                         iteration);
  iteration_ = iteration;
}

std::shared_ptr<CommHookSpec> post_local_sgd_spec(const PostLocalSGDOptions& options) {
  options.validate();
  CommHookSpec::OnTopology on_topology;
  on_topology.node_size = options.subgroup_size;
  on_topology.make = [options](Communicator& world, Topology& topology) {
    return std::make_unique<PostLocalSGDHook>(world, topology.node(), options.start_local_sgd_iter,
                                              options.post_local_gradient_allreduce);
  };
  on_topology.make_averager = [options](Topology& topology) -> std::unique_ptr<averaging::ModelAverager> {
    if (options.model_averaging_periods) {
      return std::make_unique<averaging::HierarchicalModelAverager>(topology, *options.model_averaging_periods,
                                                                    options.start_local_sgd_iter);
    }
    return std::make_unique<averaging::PeriodicModelAverager>(topology.world(), *options.model_averaging_period,
                                                              options.start_local_sgd_iter);
  };
  on_topology.check_world_size = [options](int64_t world_size) { options.check_world_size(world_size); };
  return std::make_shared<CommHookSpec>("post_local_sgd", std::move(on_topology),
                                        CommHookTraits{.steps_locally = true});
}

void add_post_local_sgd_hook(CommHookRegistry& registry) {
  registry.add("post_local_sgd",
               "post-local-SGD: DDP until start_local_sgd_iter, then gradients within subgroups and the models "
               "averaged every model_averaging_period steps (PyTorch's post_localSGD_hook + model averager)",
               PostLocalSGDOptions::schema(),
               [](const PostLocalSGDOptions& options) { return post_local_sgd_spec(options); });
}

}  // namespace volt::ddp
