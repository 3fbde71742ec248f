#include "core/host_sync_observer.h"

#include <algorithm>
#include <memory>

namespace volt {

// The observers alive now, behind one global RecordFunction callback that exists while any does.
struct HostSyncObservers {
  std::mutex mutex;
  std::vector<HostSyncObserver*> alive;
  at::CallbackHandle handle = 0;

  static HostSyncObservers& get() {
    static HostSyncObservers observers;
    return observers;
  }
  static std::vector<std::string>& scopes() {
    thread_local std::vector<std::string> stack;
    return stack;
  }
  static bool is_volt_scope(const at::RecordFunction& fn) {
    return fn.scope() == at::RecordScope::USER_SCOPE && std::string(fn.name()).rfind("volt::", 0) == 0;
  }
  static std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
    auto& self = get();
    const bool scope = is_volt_scope(fn);
    const bool read = !scope && std::string(fn.name()) == "aten::_local_scalar_dense";
    if (!scope && !read) return nullptr;
    if (scope) scopes().emplace_back(fn.name());
    std::string site;
    if (read) {
      for (const auto& s : scopes()) site += (site.empty() ? "" : " > ") + s;
    }
    std::lock_guard<std::mutex> lock(self.mutex);
    for (auto* observer : self.alive) {
      if (observer->thread_ && *observer->thread_ != std::this_thread::get_id()) continue;
      if (scope) {
        observer->note_scope(fn.name());
      } else {
        observer->note_read(site);
      }
    }
    return nullptr;
  }
  static void on_end(const at::RecordFunction& fn, at::ObserverContext*) {
    if (is_volt_scope(fn) && !scopes().empty()) scopes().pop_back();
  }
};

HostSyncObserver::HostSyncObserver(bool this_thread_only) {
  if (this_thread_only) thread_ = std::this_thread::get_id();
  auto& observers = HostSyncObservers::get();
  std::lock_guard<std::mutex> lock(observers.mutex);
  observers.alive.push_back(this);
  if (observers.alive.size() == 1) {
    observers.handle = at::addGlobalCallback(
        at::RecordFunctionCallback(&HostSyncObservers::on_start, &HostSyncObservers::on_end)
            .scopes({at::RecordScope::FUNCTION, at::RecordScope::USER_SCOPE}));
  }
}

HostSyncObserver::~HostSyncObserver() {
  auto& observers = HostSyncObservers::get();
  std::lock_guard<std::mutex> lock(observers.mutex);
  observers.alive.erase(std::remove(observers.alive.begin(), observers.alive.end(), this), observers.alive.end());
  if (observers.alive.empty()) at::removeCallback(observers.handle);
}

std::vector<std::string> HostSyncObserver::sites() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return sites_;
}

int64_t HostSyncObserver::entered(const std::string& scope) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = entered_.find(scope);
  return it == entered_.end() ? 0 : it->second;
}

void HostSyncObserver::note_scope(const std::string& name) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++entered_[name];
}

void HostSyncObserver::note_read(const std::string& site) {
  std::lock_guard<std::mutex> lock(mutex_);
  sites_.push_back(site);
}

}  // namespace volt
