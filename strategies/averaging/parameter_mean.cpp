#include "strategies/averaging/parameter_mean.h"

#include "distributed/flat_buffers.h"

namespace volt::averaging {

void replace_by_mean(const std::vector<torch::Tensor>& parameters, Communicator& group) {
  if (group.size() == 1) return;
  through_flat_buffers(parameters, [&group](torch::Tensor& flat) {
    flat.div_(static_cast<double>(group.size()));
    group.all_reduce(flat, ReduceOp::Sum);
  });
}

}  // namespace volt::averaging
