#pragma once
// Which ATen operators ran: a RecordFunction observer that counts them by name while it is alive,
// for tests that must see a particular kernel (a fused one) run, or not run.
#include <ATen/record_function.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace volt::testing {

// Counts the operators the dispatcher runs while it is alive, by name ("aten::add_", ...).
class OperatorCounter {
 public:
  OperatorCounter() {
    instance() = this;
    handle_ = at::addGlobalCallback(at::RecordFunctionCallback(&OperatorCounter::on_start)
                                        .scopes({at::RecordScope::FUNCTION}));
  }
  ~OperatorCounter() {
    at::removeCallback(handle_);
    instance() = nullptr;
  }
  OperatorCounter(const OperatorCounter&) = delete;
  OperatorCounter& operator=(const OperatorCounter&) = delete;

  int64_t count(const std::string& name) const {
    std::lock_guard<std::mutex> lock(mutex_);
    int64_t n = 0;
    for (const auto& seen : names_) n += seen == name;
    return n;
  }

 private:
  static OperatorCounter*& instance() {
    static OperatorCounter* current = nullptr;
    return current;
  }
  static std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
    if (auto* self = instance()) {
      std::lock_guard<std::mutex> lock(self->mutex_);
      self->names_.emplace_back(fn.name());
    }
    return nullptr;
  }
  at::CallbackHandle handle_;
  mutable std::mutex mutex_;
  std::vector<std::string> names_;
};

}  // namespace volt::testing
