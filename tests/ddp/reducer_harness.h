#pragma once
// What the reducer tests share: a small net whose parameters fill several tiny buckets.
#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "strategies/ddp/reducer.h"

namespace volt::ddp::harness {

// 8 → 16 → 4 with two optional extras: `branch` (used when the loss asks for it) and `spare`
// (never used).
struct Net : torch::nn::Module {
  torch::nn::Linear first{nullptr}, second{nullptr}, branch{nullptr}, spare{nullptr};
  explicit Net(bool extras) {
    first = register_module("first", torch::nn::Linear(8, 16));
    second = register_module("second", torch::nn::Linear(16, 4));
    if (extras) {
      branch = register_module("branch", torch::nn::Linear(4, 4));
      spare = register_module("spare", torch::nn::Linear(4, 4));
    }
  }
  torch::Tensor forward(const torch::Tensor& x, bool use_branch) {
    auto y = second(torch::tanh(first(x)));
    return use_branch ? y + branch(y) : y;
  }
};

// The same initial weights on every call.
inline std::shared_ptr<Net> make_net(bool extras = false) {
  torch::manual_seed(0);
  return std::make_shared<Net>(extras);
}

inline std::vector<std::string> names_of(const torch::nn::Module& m) {
  std::vector<std::string> names;
  for (const auto& item : m.named_parameters()) names.push_back(item.key());
  return names;
}

// Every parameter's gradient, flattened and concatenated in parameter order.
inline torch::Tensor flat_grads(const torch::nn::Module& m) {
  std::vector<torch::Tensor> parts;
  for (const auto& p : m.parameters()) parts.push_back(p.grad().flatten());
  return torch::cat(parts);
}

inline ReducerOptions tiny_buckets() {
  ReducerOptions o;
  o.bucket_cap_mb = 300.0 / (1 << 20);  // ~300 bytes: several buckets for this small net
  return o;
}

}  // namespace volt::ddp::harness
