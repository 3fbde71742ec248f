#pragma once
#include <string>

#include "core/option_schema.h"
#include "strategies/strategy.h"

namespace volt {

// The options of `--strategy single_device[:key=value]`.
struct SingleDeviceOptions {
  std::string activation_checkpointing;  // module types whose forwards run checkpointed; empty: none

  static const OptionSchema<SingleDeviceOptions>& schema();
};

// One process, one device: no communication at all. What "auto" resolves to when one device is
// asked for.
class SingleDeviceStrategy : public Strategy {
 public:
  explicit SingleDeviceStrategy(SingleDeviceOptions options = {});
  std::string name() const override { return "single_device"; }
  // Its step is the module's, the precision's and the optimizer's work alone. A subclass that
  // names itself otherwise is refused like any strategy unless it overrides this in turn.
  void check_capturable() const override {
    if (name() != "single_device") Strategy::check_capturable();
    check_checkpointing_capturable();
  }
};

}  // namespace volt
