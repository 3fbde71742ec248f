#include "strategies/dense_gradients.h"

#include "core/error.h"

namespace volt {
namespace {

const char* kWhatToDo =
    "; build it with sparse=false (a dense gradient, which every strategy reduces), or train on one process "
    "(--strategy single_device). See Note [Sparse gradients]";

bool declares_sparse_gradients(const torch::nn::Module& module) {
  if (const auto* embedding = dynamic_cast<const torch::nn::EmbeddingImpl*>(&module))
    return embedding->options.sparse();
  if (const auto* bag = dynamic_cast<const torch::nn::EmbeddingBagImpl*>(&module)) return bag->options.sparse();
  return false;
}

}  // namespace

void refuse_sparse_gradient_modules(const torch::nn::Module& module, const std::string& strategy) {
  std::string names;
  for (const auto& item : module.named_modules("", /*include_self=*/true)) {
    if (!declares_sparse_gradients(*item.value())) continue;
    names +=
        (names.empty() ? "'" : ", '") + (item.key().empty() ? std::string("(the module itself)") : item.key()) + "'";
  }
  check<NotSupportedError>(names.empty(), "--strategy ", strategy, ": submodule(s) ", names,
                           " are built with sparse=true and would produce sparse gradients, which distributed "
                           "strategies do not reduce", kWhatToDo);
}

void check_dense_gradient(const torch::Tensor& parameter, const std::string& name, const std::string& strategy) {
  const auto& grad = parameter.grad();
  check<NotSupportedError>(!grad.defined() || grad.layout() == torch::kStrided, "--strategy ", strategy,
                           ": parameter '", name, "' received a sparse gradient (from torch::embedding(..., "
                           "sparse=true) or another sparse op), which distributed strategies do not reduce",
                           kWhatToDo);
}

}  // namespace volt
