#include "strategies/ddp/comm_hook.h"

namespace volt::ddp {

CollectiveHandle AllReduceHook::run(GradBucket& bucket) {
  bucket.buffer.div_(static_cast<double>(communicator_.size()));
  return communicator_.all_reduce_async(bucket.buffer, ReduceOp::Sum);
}

}  // namespace volt::ddp
