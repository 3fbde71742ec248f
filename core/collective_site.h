#pragma once
// Where a collective is called from, in volt's terms ("ddp bucket 2 (backward)", "save_checkpoint",
// "Fabric::barrier"), for the hang report (Note [Diagnosing a hang] in distributed/hang_check.h). A
// CollectiveSite names the collectives the calling thread starts during its lifetime; sites nest,
// the innermost naming them alone. A collective started where no site is open is described by
// its kind and group only.
#include <string>

namespace volt {

class CollectiveSite {
 public:
  explicit CollectiveSite(std::string name);
  ~CollectiveSite();
  CollectiveSite(const CollectiveSite&) = delete;
  CollectiveSite& operator=(const CollectiveSite&) = delete;

 private:
  std::string previous_;
};

// The calling thread's innermost open site; "" where none is open.
const std::string& current_collective_site();

}  // namespace volt
