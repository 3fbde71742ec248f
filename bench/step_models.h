#pragma once
// The three models of bench/trainer_vs_lightning, defined exactly as its Python worker
// (bench/trainer_vs_lightning_worker.py) defines them: the same parameter names, shapes and
// initial values (step_models_init), the same synthetic data (step_models_data), the same loss,
// optimizer and precision. Keep both files in step: the benchmark refuses to print a table when
// the two sides' initial weights differ (their sums are compared).
#include <torch/torch.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "core/compat.h"
#include "core/error.h"
#include "trainer/volt.h"

namespace volt::bench {

namespace nn = torch::nn;

struct StepModelSpec {
  std::string name;       // cnn | mlp | gpt
  int64_t batch = 0;      // samples per step
  std::string precision;  // a volt / Lightning precision name
  int64_t sequence = 1;   // tokens per sample (throughput is counted in tokens for the GPT)
};

inline constexpr int64_t kGptVocab = 50304, kGptSequence = 512, kGptWidth = 768, kGptHeads = 12, kGptLayers = 6;

inline StepModelSpec step_model_spec(const std::string& name) {
  if (name == "cnn") return {"cnn", 256, "32-true", 1};
  if (name == "mlp") return {"mlp", 512, "32-true", 1};
  if (name == "gpt") return {"gpt", 8, "bf16-mixed", kGptSequence};
  throw ConfigurationError("step model '" + name + "': expected cnn, mlp or gpt");
}

// A model of the benchmark as the volt Module its Trainer and Fabric rows train: forward, the
// loss, AdamW(lr 1e-4, weight decay 0.01) as volt::FusedAdamW (Note [Fused AdamW]; the raw LibTorch
// row also runs LibTorch's own per-parameter AdamW, `fused` false). Logs train_loss on every step when `log_loss` (the
// default Trainer row, as Lightning's default row does; the barebones rows log nothing).
class StepModel : public volt::Module {
 public:
  virtual torch::Tensor forward(const torch::Tensor& input) = 0;
  torch::Tensor loss(const torch::Tensor& output, const torch::Tensor& target) const {
    // Logits in float32 (under bf16 autocast the head's output is bfloat16), as the worker does.
    return torch::nn::functional::cross_entropy(output.to(torch::kFloat).flatten(0, output.dim() - 2),
                                                target.flatten());
  }
  torch::Tensor training_step(const volt::Batch& batch, int64_t) override {
    auto value = loss(forward(batch.input), batch.target);
    if (log_loss) log("train_loss", value, {.prog_bar = true});
    return value;
  }
  volt::OptimizerConfig configure_optimizers() override { return make_optimizer(parameters()); }
  static std::shared_ptr<torch::optim::Optimizer> make_optimizer(const std::vector<torch::Tensor>& params,
                                                                  bool fused = true) {
    const auto options = torch::optim::AdamWOptions(1e-4).weight_decay(0.01);
    if (fused) return std::make_shared<volt::FusedAdamW>(params, options);
    return std::make_shared<torch::optim::AdamW>(params, options);
  }

  bool log_loss = false;
};

// The main job's CNN (examples/fashion_mnist/classifier.cpp), without its metrics.
class StepCnn : public StepModel {
 public:
  StepCnn() {
    features_ = register_module(
        "features", nn::Sequential(nn::Conv2d(nn::Conv2dOptions(1, 32, 3).padding(1).bias(false)), nn::BatchNorm2d(32),
                                   nn::ReLU(), nn::MaxPool2d(2),
                                   nn::Conv2d(nn::Conv2dOptions(32, 64, 3).padding(1).bias(false)),
                                   nn::BatchNorm2d(64), nn::ReLU(), nn::MaxPool2d(2)));
    head_ = register_module("head", nn::Sequential(nn::Flatten(), nn::Linear(64 * 7 * 7, 128), nn::ReLU(),
                                                   nn::Dropout(0.25), nn::Linear(128, 10)));
  }
  torch::Tensor forward(const torch::Tensor& images) override { return head_->forward(features_->forward(images)); }

 private:
  nn::Sequential features_{nullptr}, head_{nullptr};
};

class StepMlp : public StepModel {
 public:
  StepMlp() {
    net_ = register_module("net", nn::Sequential(nn::Linear(1024, 4096), nn::ReLU(), nn::Linear(4096, 4096), nn::ReLU(),
                                                 nn::Linear(4096, 10)));
  }
  torch::Tensor forward(const torch::Tensor& x) override { return net_->forward(x); }

 private:
  nn::Sequential net_{nullptr};
};

// Causal multi-head self-attention: one projection to queries, keys and values, PyTorch's fused
// scaled-dot-product attention where LibTorch has it (2.x: flash / memory-efficient kernels on the
// GPU, as F.scaled_dot_product_attention on the Python side), the same arithmetic spelled out on 1.13.
class StepAttentionImpl : public nn::Module {
 public:
  StepAttentionImpl() {
    qkv = register_module("qkv", nn::Linear(kGptWidth, 3 * kGptWidth));
    proj = register_module("proj", nn::Linear(kGptWidth, kGptWidth));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    const int64_t b = x.size(0), t = x.size(1), head_width = kGptWidth / kGptHeads;
    auto parts = qkv->forward(x).split(kGptWidth, -1);
    for (auto& p : parts) p = p.view({b, t, kGptHeads, head_width}).transpose(1, 2);
#if TORCH_VERSION_MAJOR >= 2
    auto y = at::scaled_dot_product_attention(parts[0], parts[1], parts[2], {}, 0.0, /*is_causal=*/true);
#else
    auto scores = parts[0].matmul(parts[1].transpose(-2, -1)) / std::sqrt(static_cast<double>(head_width));
    const auto future = torch::ones({t, t}, torch::TensorOptions().dtype(torch::kBool).device(x.device())).triu(1);
    auto y = scores.masked_fill(future, -std::numeric_limits<double>::infinity()).softmax(-1).matmul(parts[2]);
#endif
    return proj->forward(y.transpose(1, 2).reshape({b, t, kGptWidth}));
  }
  nn::Linear qkv{nullptr}, proj{nullptr};
};
TORCH_MODULE(StepAttention);

class StepBlockImpl : public nn::Module {
 public:
  StepBlockImpl() {
    ln1 = register_module("ln1", nn::LayerNorm(nn::LayerNormOptions({kGptWidth})));
    attn = register_module("attn", StepAttention());
    ln2 = register_module("ln2", nn::LayerNorm(nn::LayerNormOptions({kGptWidth})));
    mlp = register_module("mlp", nn::Sequential(nn::Linear(kGptWidth, 4 * kGptWidth), nn::GELU(),
                                                nn::Linear(4 * kGptWidth, kGptWidth)));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = x + attn->forward(ln1->forward(x));
    return x + mlp->forward(ln2->forward(x));
  }
  nn::LayerNorm ln1{nullptr}, ln2{nullptr};
  StepAttention attn{nullptr};
  nn::Sequential mlp{nullptr};
};
TORCH_MODULE(StepBlock);

// A GPT-style decoder: token and position embeddings, pre-norm blocks, an untied head.
class StepGpt : public StepModel {
 public:
  StepGpt() {
    tok_emb_ = register_module("tok_emb", nn::Embedding(kGptVocab, kGptWidth));
    pos_emb_ = register_module("pos_emb", nn::Embedding(kGptSequence, kGptWidth));
    blocks_ = register_module("blocks", nn::ModuleList());
    for (int64_t i = 0; i < kGptLayers; ++i) blocks_->push_back(StepBlock());
    ln_f_ = register_module("ln_f", nn::LayerNorm(nn::LayerNormOptions({kGptWidth})));
    head_ = register_module("head", nn::Linear(nn::LinearOptions(kGptWidth, kGptVocab).bias(false)));
  }
  torch::Tensor forward(const torch::Tensor& tokens) override {
    const auto positions =
        torch::arange(tokens.size(1), torch::TensorOptions().dtype(torch::kLong).device(tokens.device()));
    auto x = tok_emb_->forward(tokens) + pos_emb_->forward(positions);
    for (const auto& block : *blocks_) x = block->as<StepBlock>()->forward(x);
    return head_->forward(ln_f_->forward(x));
  }
  // Parameters that multiply (all but the embedding tables): the N of the 6·N FLOPs per token.
  int64_t matmul_parameters() const {
    int64_t n = 0;
    for (const auto& p : parameters()) n += p.numel();
    return n - tok_emb_->weight.numel() - pos_emb_->weight.numel();
  }

 private:
  nn::Embedding tok_emb_{nullptr}, pos_emb_{nullptr};
  nn::ModuleList blocks_{nullptr};
  nn::LayerNorm ln_f_{nullptr};
  nn::Linear head_{nullptr};
};

inline std::shared_ptr<StepModel> make_step_model(const std::string& name) {
  if (name == "cnn") return std::make_shared<StepCnn>();
  if (name == "mlp") return std::make_shared<StepMlp>();
  if (name == "gpt") return std::make_shared<StepGpt>();
  throw ConfigurationError("step model '" + name + "': expected cnn, mlp or gpt");
}

// The initial weights both sides give a model (on the CPU, in float32, before it moves): the i-th
// parameter in name order is N(0, 1/fan_in) drawn from a CPU generator seeded 1000 + i when it is a
// matrix or kernel; a one-dimensional "…weight" (a norm's scale) is ones, other vectors zeros.
// Returns the sum of every parameter in float64: what the benchmark compares across the sides.
inline double step_models_init(torch::nn::Module& model) {
  auto named = model.named_parameters();
  std::vector<std::string> names;
  for (const auto& item : named) names.push_back(item.key());
  std::sort(names.begin(), names.end());
  torch::NoGradGuard no_grad;
  double sum = 0;
  for (size_t i = 0; i < names.size(); ++i) {
    auto& p = named[names[i]];
    if (p.dim() >= 2) {
      auto generator = at::detail::createCPUGenerator(1000 + i);
      const double fan_in = static_cast<double>(p.numel() / p.size(0));
      p.copy_(torch::randn(p.sizes(), generator) / std::sqrt(fan_in));
    } else if (names[i].size() >= 6 && names[i].compare(names[i].size() - 6, 6, "weight") == 0) {
      p.fill_(1.0);
    } else {
      p.zero_();
    }
    sum += p.to(torch::kDouble).sum().item<double>();
  }
  return sum;
}

// `samples` inputs and targets of `model`, drawn from a CPU generator seeded 1 (inputs first),
// then moved to `device` once.
inline std::pair<torch::Tensor, torch::Tensor> step_models_data(const std::string& model, int64_t samples,
                                                               const torch::Device& device) {
  auto generator = at::detail::createCPUGenerator(1);
  torch::Tensor x, y;
  if (model == "cnn") {
    x = torch::randn({samples, 1, 28, 28}, generator);
    y = torch::randint(10, {samples}, generator);
  } else if (model == "mlp") {
    x = torch::randn({samples, 1024}, generator);
    y = torch::randint(10, {samples}, generator);
  } else {
    x = torch::randint(kGptVocab, {samples, kGptSequence}, generator);
    y = torch::randint(kGptVocab, {samples, kGptSequence}, generator);
  }
  return {x.to(device), y.to(device)};
}

}  // namespace volt::bench
