#pragma once
// Where the host read a tensor's value: a RecordFunction observer that, while it is alive, notes
// every aten::_local_scalar_dense (what Tensor::item() runs; on a GPU it waits for the device)
// with the volt scopes it ran in (Note [Named scopes around the step]). The Trainer's captured
// step watches its eager warm-up steps with one (a step that reads on the host cannot be
// captured), and tests check with one that a step does not synchronize, naming the site of any
// synchronization they find. Several observers may be alive at once.
#include <ATen/record_function.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace volt {

class HostSyncObserver {
 public:
  // `this_thread_only`: only reads made by the constructing thread count.
  explicit HostSyncObserver(bool this_thread_only = false);
  ~HostSyncObserver();
  HostSyncObserver(const HostSyncObserver&) = delete;
  HostSyncObserver& operator=(const HostSyncObserver&) = delete;

  // One entry per read: the volt scopes it ran in, outermost first, joined by " > " ("" outside all).
  std::vector<std::string> sites() const;
  // How often a scope of this name was entered.
  int64_t entered(const std::string& scope) const;

 private:
  friend struct HostSyncObservers;
  void note_scope(const std::string& name);
  void note_read(const std::string& site);

  std::optional<std::thread::id> thread_;
  mutable std::mutex mutex_;
  std::vector<std::string> sites_;
  std::map<std::string, int64_t> entered_;
};

}  // namespace volt
