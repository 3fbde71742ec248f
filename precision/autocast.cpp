#include "precision/autocast.h"

#include "core/compat.h"

namespace volt {

ScopeGuard autocast_scope(c10::DeviceType device_type, torch::Dtype dtype) {
  const bool was_enabled = compat::autocast_enabled(device_type);
  const auto previous_dtype = compat::autocast_dtype(device_type);
  compat::set_autocast_enabled(device_type, true);
  compat::set_autocast_dtype(device_type, dtype);
  at::autocast::increment_nesting();
  return ScopeGuard([device_type, was_enabled, previous_dtype] {
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    compat::set_autocast_enabled(device_type, was_enabled);
    compat::set_autocast_dtype(device_type, previous_dtype);
  });
}

ScopeGuard default_dtype_scope(torch::Dtype dtype) {
  const auto previous = c10::get_default_dtype();
  c10::set_default_dtype(c10::scalarTypeToTypeMeta(dtype));
  return ScopeGuard([previous] { c10::set_default_dtype(previous); });
}

}  // namespace volt
