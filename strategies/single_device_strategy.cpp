#include "strategies/single_device_strategy.h"

#include "strategies/shared_strategy_options.h"

namespace volt {

const OptionSchema<SingleDeviceOptions>& SingleDeviceOptions::schema() {
  static const auto schema = OptionSchema<SingleDeviceOptions>("--strategy single_device")
                                 .with(activation_checkpointing_option(&SingleDeviceOptions::activation_checkpointing));
  return schema;
}

SingleDeviceStrategy::SingleDeviceStrategy(SingleDeviceOptions options) {
  SingleDeviceOptions::schema().validate(options);
  set_activation_checkpointing(checkpointing_policy(options.activation_checkpointing));
}

}  // namespace volt
