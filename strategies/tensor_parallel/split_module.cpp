#include "strategies/tensor_parallel/split_module.h"

#include "core/error.h"

namespace volt::tp {

const SplitModule::Split* SplitModule::find(const torch::Tensor& parameter) const {
  for (const auto& s : splits_) {
    if (s.parameter.unsafeGetTensorImpl() == parameter.unsafeGetTensorImpl()) return &s;
  }
  return nullptr;
}

void SplitModule::split(torch::Tensor& parameter, int64_t dim, const std::string& what, int64_t parts) {
  splits_.push_back({parameter, dim, parameter.sizes().vec(), parts});
  if (dim < 0) return;
  const int64_t size = parameter.size(dim);
  check<ConfigurationError>(size % (parts * group_.size()) == 0, "tensor_parallel: ", path_, " (", to_string(style_),
                            parts > 1 ? ":" + std::to_string(parts) : std::string(), ") has ", size, " ", what,
                            parts > 1 ? ", " + std::to_string(parts) + " fused parts" : std::string(),
                            ", which do not divide among ", group_.size(),
                            " ranks; choose tp that divides them or leave the module out of the plan");
  torch::NoGradGuard no_grad;
  parameter.set_data(slice_of(parameter, parameter.detach()).clone());
}

std::vector<torch::Tensor> SplitModule::split_parameters() const {
  std::vector<torch::Tensor> out;
  for (const auto& s : splits_) {
    if (s.dim >= 0) out.push_back(s.parameter);
  }
  return out;
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
  const int64_t parts = find(parameter)->parts;
  const int64_t length = whole.size(dim) / parts / group_.size();
  if (parts == 1) return whole.narrow(dim, group_.rank() * length, length);
  // [.., parts, T·length, ..]: this rank's length of each part, side by side.
  auto shape = whole.sizes().vec();
  shape[dim] = whole.size(dim) / parts;
  shape.insert(shape.begin() + dim, parts);
  auto sliced_shape = whole.sizes().vec();
  sliced_shape[dim] = parts * length;
  return whole.reshape(shape).narrow(dim + 1, group_.rank() * length, length).reshape(sliced_shape);
}

torch::Tensor SplitModule::gathered(const torch::Tensor& parameter, const torch::Tensor& slice) const {
  const int64_t dim = split_dimension(parameter);
  if (dim < 0) return slice;
  const auto stacked = group_.all_gather(slice.contiguous());  // [T, ...]: rank r's slice at r
  const int64_t parts = find(parameter)->parts;
  if (parts == 1) return torch::cat(stacked.unbind(0), dim);
  // [T, .., parts, length, ..] -> [.., parts, T, length, ..] -> whole: each part's slices in rank order.
  auto shape = stacked.sizes().vec();
  shape[dim + 1] = slice.size(dim) / parts;
  shape.insert(shape.begin() + dim + 1, parts);
  auto whole_shape = slice.sizes().vec();
  whole_shape[dim] = slice.size(dim) * group_.size();
  return stacked.reshape(shape).movedim(0, dim + 1).reshape(whole_shape);
}

void SplitModule::restore() {
  if (restored_) return;
  torch::NoGradGuard no_grad;
  for (auto& s : splits_) s.parameter.set_data(gathered(s.parameter, s.parameter.detach()));
  restored_ = true;
}

}  // namespace volt::tp
