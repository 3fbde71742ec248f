#pragma once
// The MLPs the distributed benchmarks train (ddp_vs_torch, comm_hooks, local_sgd_bench), described
// by their layer widths ("256,512,256,10") and built the same way as their Python workers build
// them, so that both sides start from the same layers.
#include <torch/torch.h>

#include <sstream>
#include <string>
#include <vector>

namespace volt::bench {

// "1024,2048,10" → {1024, 2048, 10}.
inline std::vector<int64_t> parse_widths(const std::string& text) {
  std::vector<int64_t> widths;
  std::stringstream in(text);
  std::string part;
  while (std::getline(in, part, ',')) widths.push_back(std::stoll(part));
  return widths;
}

// Weights and biases of the MLP `widths` describes.
inline int64_t mlp_parameter_count(const std::string& widths) {
  const auto w = parse_widths(widths);
  int64_t n = 0;
  for (size_t i = 0; i + 1 < w.size(); ++i) n += w[i] * w[i + 1] + w[i + 1];
  return n;
}

// Linear layers from widths[i] to widths[i + 1], an `Activation` between two of them, initialized
// from the generator's current state (seed it first for the same weights).
template <typename Activation>
torch::nn::Sequential make_mlp(const std::vector<int64_t>& widths) {
  torch::nn::Sequential mlp;
  for (size_t i = 0; i + 1 < widths.size(); ++i) {
    mlp->push_back(torch::nn::Linear(widths[i], widths[i + 1]));
    if (i + 2 < widths.size()) mlp->push_back(Activation());
  }
  return mlp;
}

// The MLP with ReLU between layers, from its widths' text.
inline torch::nn::Sequential make_mlp(const std::string& widths) {
  return make_mlp<torch::nn::ReLU>(parse_widths(widths));
}

// The names of `module`'s parameters, in registration order (what the Reducer takes).
inline std::vector<std::string> parameter_names(const torch::nn::Module& module) {
  std::vector<std::string> names;
  for (const auto& item : module.named_parameters()) names.push_back(item.key());
  return names;
}

}  // namespace volt::bench
