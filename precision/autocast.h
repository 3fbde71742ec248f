#pragma once
#include <torch/torch.h>

#include "core/scope_guard.h"

namespace volt {

// Autocast to `dtype` for ops on `device_type` until the returned guard is destroyed, nesting like
// torch.autocast: on exit the previous enabled flag and dtype come back, and the cache of cast
// weights is cleared when the outermost scope ends (weights change between steps). Autocast state
// is thread-local: the guard must be destroyed on the thread that made it.
ScopeGuard autocast_scope(c10::DeviceType device_type, torch::Dtype dtype);

// The default dtype of new floating-point tensors (torch::ones, ...) set to `dtype` until the
// guard is destroyed. Process-wide, like torch.set_default_dtype.
ScopeGuard default_dtype_scope(torch::Dtype dtype);

}  // namespace volt
