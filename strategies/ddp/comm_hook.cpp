#include "strategies/ddp/comm_hook.h"

namespace volt::ddp {

std::vector<torch::Tensor> gradient_views(const GradBucket& bucket) {
  std::vector<torch::Tensor> views;
  int64_t offset = 0;
  for (const auto& parameter : bucket.parameters) {
    views.push_back(bucket.buffer.narrow(0, offset, parameter.numel()).view(parameter.sizes()));
    offset += parameter.numel();
  }
  return views;
}

CollectiveHandle AllReduceHook::run(GradBucket& bucket) {
  if (communicator_.reduces_through_shared_memory())
    return communicator_.all_reduce_async(bucket.buffer, ReduceOp::Mean);
  bucket.buffer.div_(static_cast<double>(communicator_.size()));
  return communicator_.all_reduce_async(bucket.buffer, ReduceOp::Sum);
}

}  // namespace volt::ddp
