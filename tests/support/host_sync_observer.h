#pragma once
// Where the host read a tensor's value: a RecordFunction observer that, while it is alive, notes
// every aten::_local_scalar_dense (what Tensor::item() runs; on a GPU it waits for the device)
// with the volt scopes it ran in (Note [Named scopes around the step]), for tests that a step
// does not synchronize and that name the site of any synchronization they find.
#include <ATen/record_function.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace volt::testing {

class HostSyncObserver {
 public:
  HostSyncObserver() {
    instance() = this;
    handle_ = at::addGlobalCallback(at::RecordFunctionCallback(&HostSyncObserver::on_start, &HostSyncObserver::on_end)
                                        .scopes({at::RecordScope::FUNCTION, at::RecordScope::USER_SCOPE}));
  }
  ~HostSyncObserver() {
    at::removeCallback(handle_);
    instance() = nullptr;
  }
  HostSyncObserver(const HostSyncObserver&) = delete;
  HostSyncObserver& operator=(const HostSyncObserver&) = delete;

  // One entry per read: the volt scopes it ran in, outermost first, joined by " > " ("" outside all).
  std::vector<std::string> sites() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return sites_;
  }
  // How often a scope of this name was entered.
  int64_t entered(const std::string& scope) const {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = entered_.find(scope);
    return it == entered_.end() ? 0 : it->second;
  }

 private:
  static HostSyncObserver*& instance() {
    static HostSyncObserver* current = nullptr;
    return current;
  }
  static std::vector<std::string>& scopes() {
    thread_local std::vector<std::string> stack;
    return stack;
  }
  static bool is_volt_scope(const at::RecordFunction& fn) {
    return fn.scope() == at::RecordScope::USER_SCOPE && std::string(fn.name()).rfind("volt::", 0) == 0;
  }
  static std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
    auto* self = instance();
    if (self == nullptr) return nullptr;
    if (is_volt_scope(fn)) {
      scopes().emplace_back(fn.name());
      std::lock_guard<std::mutex> lock(self->mutex_);
      ++self->entered_[fn.name()];
    } else if (std::string(fn.name()) == "aten::_local_scalar_dense") {
      std::string site;
      for (const auto& s : scopes()) site += (site.empty() ? "" : " > ") + s;
      std::lock_guard<std::mutex> lock(self->mutex_);
      self->sites_.push_back(site);
    }
    return nullptr;
  }
  static void on_end(const at::RecordFunction& fn, at::ObserverContext*) {
    if (is_volt_scope(fn) && !scopes().empty()) scopes().pop_back();
  }
  at::CallbackHandle handle_;
  mutable std::mutex mutex_;
  std::vector<std::string> sites_;
  std::map<std::string, int64_t> entered_;
};

}  // namespace volt::testing
