#pragma once
// Note [Named scopes around the step]: the Trainer marks the phases of a step (training_step,
// backward, optimizer_step, clip_gradients) and every place where it reads a device value on the
// host (the progress bar's refresh, a logger's write, a callback asking for metrics) with a named
// RecordFunction scope ("volt::..."). A profiler then shows where the host waited, and a test can
// name the site of any synchronization it observes (tests/trainer/host_sync_test.cpp). With no
// observer registered a scope costs one branch.
#include <ATen/record_function.h>

namespace volt {

class NamedScope {
 public:
  // `name` must outlive the scope: pass a string literal.
  explicit NamedScope(const char* name) : guard_(at::RecordScope::USER_SCOPE) {
    if (guard_.isActive()) ::at::detail::record_function_with_scope(guard_, name, c10::ArrayRef<const c10::IValue>{});
  }
  NamedScope(const NamedScope&) = delete;
  NamedScope& operator=(const NamedScope&) = delete;

 private:
  at::RecordFunction guard_;
};

}  // namespace volt
