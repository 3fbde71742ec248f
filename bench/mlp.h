#pragma once
// The MLPs the DDP benchmarks train (ddp_vs_torch, comm_hooks), built the same way as their
// Python workers build them, so that both sides start from the same layers.
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

// Linear layers from widths[i] to widths[i + 1], an `Activation` between two of them.
template <typename Activation>
torch::nn::Sequential make_mlp(const std::vector<int64_t>& widths) {
  torch::nn::Sequential mlp;
  for (size_t i = 0; i + 1 < widths.size(); ++i) {
    mlp->push_back(torch::nn::Linear(widths[i], widths[i + 1]));
    if (i + 2 < widths.size()) mlp->push_back(Activation());
  }
  return mlp;
}

// The names of `module`'s parameters, in registration order (what the Reducer takes).
inline std::vector<std::string> parameter_names(const torch::nn::Module& module) {
  std::vector<std::string> names;
  for (const auto& item : module.named_parameters()) names.push_back(item.key());
  return names;
}

}  // namespace volt::bench
