#include "strategies/tensor_parallel/parallel_cross_entropy.h"

#include <cstdint>

#include "core/error.h"
#include "nn/autograd_object.h"

namespace volt::tp {

namespace {

thread_local Communicator* active_group = nullptr;

torch::Tensor all_reduced(torch::Tensor tensor, Communicator& group, ReduceOp op) {
  group.all_reduce(tensor, op);
  return tensor;
}

// loss = mean_i [log Σ_v exp(z_iv - m_i) - (z_{i,t_i} - m_i)], each sum over every rank's columns;
// backward: (softmax - onehot(t)) / rows, this rank's columns.
class VocabParallelCrossEntropy : public torch::autograd::Function<VocabParallelCrossEntropy> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* context, const torch::Tensor& logits,
                               const torch::Tensor& target, int64_t group_address) {
    auto& group = autograd_object<Communicator>(group_address);
    const auto z = logits.detach().to(torch::kFloat);
    const int64_t columns = z.size(1), first = group.rank() * columns;
    const auto maximum = all_reduced(std::get<0>(z.max(1)).contiguous(), group, ReduceOp::Max);
    const auto shifted = z - maximum.unsqueeze(1);
    const auto exponentials = shifted.exp();
    const auto sum = all_reduced(exponentials.sum(1), group, ReduceOp::Sum);
    const auto elsewhere = (target < first).logical_or(target >= first + columns);
    const auto local = (target - first).masked_fill(elsewhere, 0);
    const auto picked = shifted.gather(1, local.unsqueeze(1)).squeeze(1).masked_fill(elsewhere, 0);
    const auto target_logit = all_reduced(picked.contiguous(), group, ReduceOp::Sum);
    context->save_for_backward({exponentials / sum.unsqueeze(1), local, elsewhere});
    context->saved_data["dtype"] = static_cast<int64_t>(logits.scalar_type());
    return (sum.log() - target_logit).mean();
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* context,
                                                 torch::autograd::variable_list gradients) {
    const auto saved = context->get_saved_variables();
    auto gradient = saved[0].clone();  // softmax over this rank's columns
    const auto hit = saved[2].logical_not().to(gradient.dtype());
    gradient.scatter_add_(1, saved[1].unsqueeze(1), -hit.unsqueeze(1));
    gradient.mul_(gradients[0] / static_cast<double>(gradient.size(0)));
    const auto dtype = static_cast<torch::Dtype>(context->saved_data["dtype"].toInt());
    return {gradient.to(dtype), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

Communicator* ActiveTensorParallelGroup::get() { return active_group; }

ScopeGuard ActiveTensorParallelGroup::activate(Communicator& group) {
  Communicator* outer = active_group;
  active_group = &group;
  return ScopeGuard([outer] { active_group = outer; });
}

torch::Tensor cross_entropy(const torch::Tensor& logits, const torch::Tensor& target, int64_t vocab_size) {
  check<ConfigurationError>(logits.dim() == 2 && target.dim() == 1 && logits.size(0) == target.size(0),
                            "volt::tp::cross_entropy: expected logits [rows, columns] and target [rows], got ",
                            logits.sizes(), " and ", target.sizes());
  if (logits.size(1) == vocab_size) return torch::nn::functional::cross_entropy(logits, target);
  auto* group = ActiveTensorParallelGroup::get();
  check<ConfigurationError>(group != nullptr && logits.size(1) * group->size() == vocab_size,
                            "volt::tp::cross_entropy: the logits have ", logits.size(1), " columns, neither the ",
                            "vocabulary's ", vocab_size, " nor its slice in a tensor_parallel step",
                            group ? " of " + std::to_string(group->size()) + " ranks" : std::string(" (none runs)"),
                            "; split the head colwise by a tp that divides the vocabulary, or pass its size");
  return VocabParallelCrossEntropy::apply(logits, target, autograd_address(*group));
}

}  // namespace volt::tp
