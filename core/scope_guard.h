#pragma once
#include <functional>
#include <utility>

namespace volt {

// Runs an action when it goes out of scope: the shape of every "region" volt hands out
// (autocast around a forward, a strategy's no_sync window). Move-only; an empty guard does nothing. The action
// must not throw (it runs in a destructor).
class ScopeGuard {
 public:
  ScopeGuard() = default;
  explicit ScopeGuard(std::function<void()> on_exit) : on_exit_(std::move(on_exit)) {}
  ScopeGuard(ScopeGuard&& other) noexcept : on_exit_(std::exchange(other.on_exit_, nullptr)) {}
  ScopeGuard& operator=(ScopeGuard&& other) noexcept {
    if (this != &other) {
      release();
      on_exit_ = std::exchange(other.on_exit_, nullptr);
    }
    return *this;
  }
  ScopeGuard(const ScopeGuard&) = delete;
  ScopeGuard& operator=(const ScopeGuard&) = delete;
  ~ScopeGuard() { release(); }

 private:
  void release() {
    if (on_exit_) std::exchange(on_exit_, nullptr)();
  }
  std::function<void()> on_exit_;
};

}  // namespace volt
