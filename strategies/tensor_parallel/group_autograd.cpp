#include "strategies/tensor_parallel/group_autograd.h"

#include <cstdint>

#include "nn/autograd_object.h"

namespace volt::tp {

namespace {

Communicator& group_of(torch::autograd::AutogradContext* context) {
  return autograd_object<Communicator>(context->saved_data["group"].toInt());
}

torch::Tensor summed(const torch::Tensor& tensor, Communicator& group) {
  auto sum = tensor.contiguous().clone();
  group.all_reduce(sum, ReduceOp::Sum);
  return sum;
}

class EnterParallelRegion : public torch::autograd::Function<EnterParallelRegion> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* context, const torch::Tensor& input, int64_t group) {
    context->saved_data["group"] = group;
    return input.view_as(input);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* context,
                                                 torch::autograd::variable_list gradients) {
    return {summed(gradients[0], group_of(context)), torch::Tensor()};
  }
};

class LeaveParallelRegion : public torch::autograd::Function<LeaveParallelRegion> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* context, const torch::Tensor& partial, int64_t group) {
    return summed(partial, autograd_object<Communicator>(group));
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext*,
                                                 torch::autograd::variable_list gradients) {
    return {gradients[0], torch::Tensor()};
  }
};

}  // namespace

torch::Tensor enter_parallel_region(const torch::Tensor& input, Communicator& group) {
  return EnterParallelRegion::apply(input, autograd_address(group));
}

torch::Tensor leave_parallel_region(const torch::Tensor& partial, Communicator& group) {
  return LeaveParallelRegion::apply(partial, autograd_address(group));
}

}  // namespace volt::tp
