#include "trainer/optim/optimizer_config.h"

#include <set>

#include "core/error.h"

namespace volt {

OptimizerConfig::OptimizerConfig(std::initializer_list<OptimizerConfig> parts) {
  for (const auto& part : parts) {
    optimizers.insert(optimizers.end(), part.optimizers.begin(), part.optimizers.end());
    schedulers.insert(schedulers.end(), part.schedulers.begin(), part.schedulers.end());
  }
}

void OptimizerConfig::validate() const {
  check<ConfigurationError>(!optimizers.empty(),
                            "configure_optimizers: expected at least one optimizer, got none");
  std::set<const void*> seen_params;
  for (const auto& optimizer : optimizers) {
    check<ConfigurationError>(optimizer != nullptr, "configure_optimizers: an optimizer is nullptr");
    for (const auto& group : optimizer->param_groups()) {
      for (const auto& p : group.params()) {
        check<ConfigurationError>(seen_params.insert(p.unsafeGetTensorImpl()).second,
                                  "configure_optimizers: a parameter of shape ", p.sizes(),
                                  " belongs to two optimizers; give each optimizer its own parameters");
      }
    }
  }
  for (const auto& config : schedulers) {
    check<ConfigurationError>(config.scheduler != nullptr, "configure_optimizers: a scheduler is nullptr");
    check<ConfigurationError>(config.frequency >= 1,
                              "configure_optimizers: expected scheduler frequency >= 1, got ",
                              config.frequency);
    bool owned = false;
    for (const auto& optimizer : optimizers) owned |= optimizer.get() == &config.scheduler->optimizer();
    check<ConfigurationError>(owned, "configure_optimizers: a scheduler drives an optimizer that is "
                                     "not among the returned optimizers");
  }
}

}  // namespace volt
