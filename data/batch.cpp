#include "data/batch.h"

#include "core/error.h"

namespace volt {

int64_t Batch::size() const {
  check<DataError>(input.defined() && input.dim() > 0,
                   "Batch: expected an input tensor with a batch dimension, got ",
                   input.defined() ? "a scalar" : "no input; set Batch::input in the dataset");
  return input.size(0);
}

const torch::Tensor& Batch::at(const std::string& name) const {
  auto found = extras.find(name);
  if (found == extras.end()) {
    std::string known;
    for (const auto& [key, value] : extras) known += (known.empty() ? "" : ", ") + key;
    throw DataError("Batch: no tensor named '" + name + "'; this batch has: [" + known +
                    "] besides input and target");
  }
  return found->second;
}

Batch Batch::to(const torch::Device& device, bool non_blocking) const {
  auto move = [&](const torch::Tensor& t) {
    return t.defined() ? t.to(device, non_blocking) : t;
  };
  Batch moved{move(input), move(target), {}};
  for (const auto& [key, value] : extras) moved.extras.emplace(key, move(value));
  return moved;
}

}  // namespace volt
