#pragma once
// The MLP the distributed benchmarks train, described by its layer widths ("256,512,256,10"):
// Linear layers with ReLU between them, so that a benchmark's size is one flag.
#include <torch/torch.h>

#include <sstream>
#include <string>
#include <vector>

namespace volt::bench {

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

// The MLP, initialized from the generator's current state (seed it first for the same weights).
inline torch::nn::Sequential make_mlp(const std::string& widths) {
  const auto w = parse_widths(widths);
  torch::nn::Sequential model;
  for (size_t i = 0; i + 1 < w.size(); ++i) {
    model->push_back(torch::nn::Linear(w[i], w[i + 1]));
    if (i + 2 < w.size()) model->push_back(torch::nn::ReLU());
  }
  return model;
}

// Its parameters' names, in parameter order (what a Reducer is built with).
inline std::vector<std::string> parameter_names(const torch::nn::Module& model) {
  std::vector<std::string> names;
  for (const auto& item : model.named_parameters()) names.push_back(item.key());
  return names;
}

}  // namespace volt::bench
