#include "strategies/ddp/gradient_bucket.h"

#include "core/error.h"

namespace volt::ddp {

int64_t GradientBucket::numel_of(const std::vector<torch::Tensor>& parameters, const std::vector<size_t>& members) {
  int64_t numel = 0;
  for (const size_t index : members) numel += parameters.at(index).numel();
  return numel;
}

GradientBucket::GradientBucket(const std::vector<torch::Tensor>& parameters, std::vector<size_t> members,
                               torch::Tensor buffer)
    : members_(std::move(members)) {
  VOLT_INTERNAL_ASSERT(!members_.empty(), "a gradient bucket needs at least one parameter");
  const auto& first = parameters.at(members_.front());
  for (const size_t index : members_) {
    const auto& p = parameters.at(index);
    VOLT_INTERNAL_ASSERT(p.scalar_type() == first.scalar_type() && p.device() == first.device(),
                         "bucket members share dtype and device");
  }
  const int64_t numel = numel_of(parameters, members_);
  if (buffer.defined()) {
    VOLT_INTERNAL_ASSERT(buffer.dim() == 1 && buffer.numel() == numel && buffer.scalar_type() == first.scalar_type() &&
                             buffer.device() == first.device(),
                         "a given bucket buffer fits its members");
    buffer_ = std::move(buffer);
  } else {
    buffer_ = torch::zeros({numel}, first.options().requires_grad(false));
  }
  int64_t offset = 0;
  for (const size_t index : members_) {
    const auto& p = parameters[index];
    views_.push_back(buffer_.narrow(0, offset, p.numel()).view(p.sizes()));
    offset += p.numel();
  }
}

bool GradientBucket::is_view_of_slot(size_t slot, const torch::Tensor& parameter) const {
  const auto& grad = parameter.grad();
  const auto& view = views_.at(slot);
  return grad.defined() && grad.is_alias_of(view) && grad.data_ptr() == view.data_ptr() &&
         grad.strides() == view.strides();
}

void GradientBucket::copy_in(size_t slot, const torch::Tensor& parameter) {
  if (is_view_of_slot(slot, parameter)) return;
  torch::NoGradGuard no_grad;
  const auto& grad = parameter.grad();
  if (grad.defined()) {
    views_[slot].copy_(grad);
  } else {
    views_[slot].zero_();
  }
}

void GradientBucket::copy_out(size_t slot, torch::Tensor& parameter) const {
  if (is_view_of_slot(slot, parameter)) return;
  torch::NoGradGuard no_grad;
  auto& grad = parameter.mutable_grad();
  if (grad.defined()) {
    grad.copy_(views_.at(slot));
  } else {
    grad = views_.at(slot).clone();
  }
}

void GradientBucket::attach_view(size_t slot, torch::Tensor& parameter) {
  if (is_view_of_slot(slot, parameter)) return;
  copy_in(slot, parameter);
  parameter.mutable_grad() = views_.at(slot);
}

}  // namespace volt::ddp
