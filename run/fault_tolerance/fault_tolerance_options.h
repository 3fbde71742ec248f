#pragma once
// `--fault-tolerance replicas=R,replica=I,lighthouse=HOST:PORT[,timeout=S,quorum_timeout=S]`: this
// process belongs to replica group I of R, each launched on its own, which meet through the
// lighthouse at HOST:PORT (Note [Fault-tolerant replicas] in distributed/fault_tolerance/quorum.h,
// docs/fault_tolerance.md).
#include <chrono>
#include <cstdint>
#include <string>

namespace volt {

template <typename Options>
class OptionSchema;

struct FaultToleranceOptions {
  int64_t replicas = 0;    // replica groups of the run, >= 1
  int64_t replica = -1;    // this launch's replica group, in [0, replicas)
  std::string lighthouse;  // HOST:PORT of volt-lighthouse
  // Bound on connecting the cross-replica groups and on each operation over them.
  std::chrono::milliseconds timeout{std::chrono::seconds(10)};
  // How long a replica waits for a quorum before the run fails.
  std::chrono::milliseconds quorum_timeout{std::chrono::minutes(5)};

  std::string host() const;  // lighthouse's host
  int64_t port() const;      // lighthouse's port

  // The options `spec` writes ("" is not a spec: the caller checks for it). Throws
  // ConfigurationError naming the key, the value and what is allowed.
  static FaultToleranceOptions parse(const std::string& spec);
  void validate() const;
  static const OptionSchema<FaultToleranceOptions>& schema();
};

}  // namespace volt
