#include "strategies/pipeline/stage_gradient_window.h"

#include <cstdint>

#include "core/error.h"
#include "nn/autograd_object.h"

namespace volt::pipeline {

namespace {

// value → value; backward: the window finishes with the incoming gradient.
class CarryStageGradients : public torch::autograd::Function<CarryStageGradients> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* context, const torch::Tensor& value,
                               const torch::Tensor& anchor, int64_t window) {
    context->saved_data["window"] = window;
    return value.clone();
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* context,
                                                 torch::autograd::variable_list gradients) {
    autograd_object<StageGradientWindow>(context->saved_data["window"].toInt()).finish(gradients[0]);
    return {torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

StageGradientWindow::StageGradientWindow() : anchor_(torch::zeros({}, torch::requires_grad())) {}

void StageGradientWindow::begin_step(std::vector<torch::Tensor> parameters) {
  VOLT_INTERNAL_ASSERT(!open_, "pipeline: a step began before the last one's loss ran backward");
  parameters_ = std::move(parameters);
  aside_.assign(parameters_.size(), torch::Tensor());
  for (size_t i = 0; i < parameters_.size(); ++i) {
    auto& parameter = parameters_[i];
    if (!parameter.grad().defined()) continue;
    aside_[i] = parameter.grad();
    parameter.mutable_grad().reset();
  }
  open_ = true;
}

torch::Tensor StageGradientWindow::carrying_loss(const torch::Tensor& value) {
  return CarryStageGradients::apply(value.detach(), anchor_, autograd_address(*this));
}

void StageGradientWindow::finish(const torch::Tensor& factor) {
  VOLT_INTERNAL_ASSERT(open_, "pipeline: a step's loss ran backward twice");
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    auto& parameter = parameters_[i];
    if (parameter.grad().defined()) {
      parameter.mutable_grad().mul_(factor.to(parameter.grad().device()));
      if (aside_[i].defined()) parameter.mutable_grad().add_(aside_[i]);
    } else if (aside_[i].defined()) {
      parameter.mutable_grad() = aside_[i];
    }
  }
  parameters_.clear();
  aside_.clear();
  open_ = false;
}

}  // namespace volt::pipeline
