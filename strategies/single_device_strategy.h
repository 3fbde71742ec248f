#pragma once
#include "strategies/strategy.h"

namespace volt {

// One process, one device: no communication at all. What "auto" resolves to when one device is
// asked for.
class SingleDeviceStrategy : public Strategy {
 public:
  std::string name() const override { return "single_device"; }
};

}  // namespace volt
