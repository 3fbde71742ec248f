#include "strategies/tensor_parallel/parallel_linear.h"

#include "core/error.h"
#include "strategies/tensor_parallel/group_autograd.h"

namespace volt::tp {

ParallelLinear::ParallelLinear(torch::nn::LinearImpl& linear, std::string path, ParallelStyle style,
                               Communicator& group, int64_t fused)
    : SplitModule(std::move(path), style, group), linear_(linear) {
  const bool colwise = style == ParallelStyle::Colwise;
  VOLT_INTERNAL_ASSERT(colwise || fused == 1, "tensor_parallel: a fused rowwise split");
  split(linear_.weight, colwise ? 0 : 1, colwise ? "output features" : "input features", fused);
  if (linear_.bias.defined()) split(linear_.bias, colwise ? 0 : -1, "output features", fused);
}

torch::Tensor ParallelLinear::around(torch::nn::Module& module, const std::vector<torch::Tensor>& tensors,
                                     const ModuleForward& forward, bool tensors_complete) {
  check<ConfigurationError>(tensors.size() == 1, "tensor_parallel: ", path(), " is called with ", tensors.size(),
                            " tensors; a split Linear takes one input");
  const auto& x = tensors[0];
  count_call();
  if (style() == ParallelStyle::Colwise) {
    return torch::nn::functional::linear(enter_parallel_region(x, group()), linear_.weight, linear_.bias);
  }
  check<ConfigurationError>(x.size(-1) == linear_.weight.size(1), "tensor_parallel: ", path(), " (rowwise) got an ",
                            "input of ", x.size(-1), " features, its slice takes ", linear_.weight.size(1),
                            "; put a colwise linear before it (its output is this rank's slice)");
  if (!linear_.bias.defined()) return leave_parallel_region(torch::nn::functional::linear(x, linear_.weight), group());
  // Each rank adds bias / T to its partial product (one addmm) before the sum. The bias's
  // gradient is then the output's, whole: the added (b - b.detach()) is zero forward and the
  // identity backward.
  const auto& bias = linear_.bias;
  const auto share = bias.detach() / static_cast<double>(group().size());
  auto y = leave_parallel_region(torch::nn::functional::linear(x, linear_.weight, share), group());
  return y + (bias - bias.detach());
}

}  // namespace volt::tp
