#include "strategies/pipeline/shared_stage_parameters.h"

#include <algorithm>

namespace volt::pipeline {

SharedStageParameters::SharedStageParameters(std::vector<Shared> shared, Communicator& group)
    : shared_(std::move(shared)), group_(group) {}

bool SharedStageParameters::holds(const Shared& shared) const {
  return std::find(shared.stages.begin(), shared.stages.end(), group_.rank()) != shared.stages.end();
}

std::vector<torch::Tensor> SharedStageParameters::copies() const {
  std::vector<torch::Tensor> out;
  for (const auto& s : shared_) {
    if (holds(s) && s.owner != group_.rank()) out.push_back(s.parameter);
  }
  return out;
}

void SharedStageParameters::sum_gradients() {
  const int64_t me = group_.rank();
  torch::NoGradGuard no_grad;
  for (auto& s : shared_) {
    if (!holds(s) || !s.parameter.requires_grad()) continue;
    auto& parameter = s.parameter;
    const auto mine = parameter.grad().defined() ? parameter.grad() : torch::zeros_like(parameter);
    // Every holder sends its part to every other holder without waiting, then receives theirs:
    // sends never block, so no order of the holders can deadlock.
    std::vector<CollectiveHandle> sends;
    std::vector<std::pair<int64_t, torch::Tensor>> parts;
    for (const int64_t stage : s.stages) {
      if (stage == me) {
        parts.emplace_back(stage, mine);
        continue;
      }
      sends.push_back(group_.send_async(mine, stage));
      parts.emplace_back(stage, torch::empty_like(mine));
    }
    for (auto& [stage, part] : parts) {
      if (stage != me) group_.recv(part, stage);
    }
    for (auto& send : sends) send.wait();
    auto sum = parts.front().second.clone();  // stage order: the same additions on every holder
    for (size_t i = 1; i < parts.size(); ++i) sum.add_(parts[i].second);
    parameter.mutable_grad() = sum;
  }
}

void SharedStageParameters::refresh_copies() {
  if (!stale_) return;
  stale_ = false;
  const int64_t me = group_.rank();
  torch::NoGradGuard no_grad;
  for (auto& s : shared_) {
    if (!holds(s)) continue;
    if (s.owner == me) {
      const auto value = s.parameter.detach().contiguous();
      std::vector<CollectiveHandle> sends;
      for (const int64_t stage : s.stages) {
        if (stage != me) sends.push_back(group_.send_async(value, stage));
      }
      for (auto& send : sends) send.wait();
    } else {
      auto value = torch::empty_like(s.parameter);
      group_.recv(value, s.owner);
      s.parameter.detach().copy_(value);
    }
  }
}

}  // namespace volt::pipeline
