#include "strategies/tensor_parallel/split_module.h"

#include "core/error.h"

namespace volt::tp {

const SplitModule::Split* SplitModule::find(const torch::Tensor& parameter) const {
  for (const auto& s : splits_) {
    if (s.parameter.unsafeGetTensorImpl() == parameter.unsafeGetTensorImpl()) return &s;
  }
  return nullptr;
}

void SplitModule::split(torch::Tensor& parameter, int64_t dim, const std::string& what) {
  splits_.push_back({parameter, dim, parameter.sizes().vec()});
  if (dim < 0) return;
  const int64_t size = parameter.size(dim);
  check<ConfigurationError>(size % group_.size() == 0, "tensor_parallel: ", path_, " (", to_string(style_), ") has ",
                            size, " ", what, ", which do not divide among ", group_.size(),
                            " ranks; choose tp that divides them or leave the module out of the plan");
  torch::NoGradGuard no_grad;
  parameter.set_data(slice_of(parameter, parameter.detach()).clone());
}

int64_t SplitModule::split_dimension(const torch::Tensor& parameter) const {
  if (restored_) return -1;  // whole again
  const auto* s = find(parameter);
  return s ? s->dim : -1;
}

std::vector<int64_t> SplitModule::whole_shape(const torch::Tensor& parameter) const {
  const auto* s = find(parameter);
  return s ? s->whole : parameter.sizes().vec();
}

torch::Tensor SplitModule::slice_of(const torch::Tensor& parameter, const torch::Tensor& whole) const {
  const int64_t dim = split_dimension(parameter);
  if (dim < 0) return whole;
  const int64_t length = whole.size(dim) / group_.size();
  return whole.narrow(dim, group_.rank() * length, length);
}

torch::Tensor SplitModule::gathered(const torch::Tensor& parameter, const torch::Tensor& slice) const {
  const int64_t dim = split_dimension(parameter);
  if (dim < 0) return slice;
  const auto stacked = group_.all_gather(slice.contiguous());  // [T, ...]: rank r's slice at r
  return torch::cat(stacked.unbind(0), dim);
}

void SplitModule::restore() {
  if (restored_) return;
  torch::NoGradGuard no_grad;
  for (auto& s : splits_) s.parameter.set_data(gathered(s.parameter, s.parameter.detach()));
  restored_ = true;
}

}  // namespace volt::tp
