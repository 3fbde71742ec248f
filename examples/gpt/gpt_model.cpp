#include "gpt/gpt_model.h"

#include <cmath>
#include <limits>
#include <stdexcept>

#include "nn/activation_checkpoint.h"
#include "nn/module_call.h"

namespace gpt {

GPTConfig GPTConfig::preset(const std::string& name) {
  if (name == "gpt2") return GPTConfig{};
  if (name == "cpu") return GPTConfig{.n_layer = 4, .n_head = 4, .n_embd = 128, .block_size = 128, .vocab_size = 256};
  throw std::invalid_argument(
      "--preset: expected gpt2 (12 layers, d768, context 1024) or cpu (4 layers, d128, "
      "context 128), got '" +
      name + "'");
}

void GPTConfig::validate() const {
  if (n_layer < 1 || n_head < 1 || n_embd < 1 || block_size < 1 || vocab_size < 1) {
    throw std::invalid_argument("GPT: layers, heads, width, context and vocabulary must be >= 1");
  }
  if (n_embd % n_head != 0) {
    throw std::invalid_argument("GPT: the width " + std::to_string(n_embd) + " is not divisible by the " +
                                std::to_string(n_head) + " heads");
  }
  if (dropout < 0 || dropout >= 1) throw std::invalid_argument("GPT: dropout must be in [0, 1)");
}

torch::Tensor causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, double dropout) {
#if TORCH_VERSION_MAJOR >= 2
  return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, dropout, /*is_causal=*/true);
#else
  const int64_t time = q.size(-2);
  auto scores = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(q.size(-1)));
  const auto future = torch::ones({time, time}, torch::dtype(torch::kBool).device(q.device())).triu(1);
  scores = scores.masked_fill(future, -std::numeric_limits<double>::infinity());
  auto weights = torch::softmax(scores, -1);
  if (dropout > 0) weights = torch::dropout(weights, dropout, /*train=*/true);
  return torch::matmul(weights.to(v.scalar_type()), v);
#endif
}

CausalSelfAttentionImpl::CausalSelfAttentionImpl(const GPTConfig& config)
    : head_dim_(config.n_embd / config.n_head), dropout_(config.dropout) {
  qkv_ = register_module("qkv", torch::nn::Linear(config.n_embd, 3 * config.n_embd));
  proj_ = register_module("proj", torch::nn::Linear(config.n_embd, config.n_embd));
  residual_dropout_ = register_module("residual_dropout", torch::nn::Dropout(config.dropout));
}

torch::Tensor CausalSelfAttentionImpl::forward(const torch::Tensor& x) {
  const int64_t batch = x.size(0), time = x.size(1);
  // The linears are called through volt::call, so that a strategy's wrapper runs around them:
  // tensor_parallel's split of qkv (colwise:3) gives this rank the q, k and v of its heads, and
  // proj (rowwise) sums the ranks' parts. `width` is then this rank's share of the heads' width.
  const auto qkv = volt::call(qkv_, x);
  const int64_t width = qkv.size(2) / 3;
  TORCH_CHECK(width % head_dim_ == 0, "GPT: this rank's ", width, " attention features are not whole heads of ",
              head_dim_, "; split the heads among ranks that divide them (tensor_parallel's tp must divide n_head)");
  const auto parts = qkv.split(width, 2);
  const auto heads = [&](const torch::Tensor& t) {
    return t.view({batch, time, width / head_dim_, head_dim_}).transpose(1, 2);
  };
  auto y = causal_attention(heads(parts[0]), heads(parts[1]), heads(parts[2]), is_training() ? dropout_ : 0.0);
  y = y.transpose(1, 2).contiguous().view({batch, time, width});
  return residual_dropout_->forward(volt::call(proj_, y));
}

BlockImpl::BlockImpl(const GPTConfig& config) {
  ln_1_ = register_module("ln_1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({config.n_embd})));
  attention_ = register_module("attention", CausalSelfAttention(config));
  ln_2_ = register_module("ln_2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({config.n_embd})));
  fc_ = register_module("fc", torch::nn::Linear(config.n_embd, 4 * config.n_embd));
  proj_ = register_module("proj", torch::nn::Linear(4 * config.n_embd, config.n_embd));
  dropout_ = register_module("dropout", torch::nn::Dropout(config.dropout));
}

torch::Tensor BlockImpl::forward(const torch::Tensor& x) {
  auto h = x + attention_->forward(ln_1_->forward(x));
  return h + dropout_->forward(volt::call(proj_, torch::gelu(volt::call(fc_, ln_2_->forward(h)), "tanh")));
}

GPTImpl::GPTImpl(const GPTConfig& config) : config_(config) {
  config_.validate();
  wte_ = register_module("wte", torch::nn::Embedding(config.vocab_size, config.n_embd));
  wpe_ = register_module("wpe", torch::nn::Embedding(config.block_size, config.n_embd));
  dropout_ = register_module("dropout", torch::nn::Dropout(config.dropout));
  blocks_ = register_module("blocks", torch::nn::Sequential());
  for (int64_t i = 0; i < config.n_layer; ++i) blocks_->push_back(Block(config));
  ln_f_ = register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({config.n_embd})));
  embedding_ = EmbeddingLayer(wte_, wpe_, dropout_, config.block_size);
  output_ = OutputLayer(ln_f_, wte_);
  // GPT-2's initialization: N(0, 0.02) weights, zero biases, and the projections that write into
  // the residual stream scaled by 1/sqrt(2 · layers), so its variance does not grow with depth.
  torch::NoGradGuard no_grad;
  for (const auto& item : named_parameters()) {
    const auto& name = item.key();
    auto parameter = item.value();
    if (name.find("ln_") != std::string::npos) continue;  // LayerNorm: ones and zeros
    if (name.size() >= 4 && name.compare(name.size() - 4, 4, "bias") == 0) {
      parameter.zero_();
    } else {
      const bool residual = name.find("proj.weight") != std::string::npos;
      parameter.normal_(0.0, residual ? 0.02 / std::sqrt(2.0 * static_cast<double>(config.n_layer)) : 0.02);
    }
  }
}

namespace {

// A block under activation checkpointing: recomputed in the backward while its module trains.
class RecomputedBlockImpl : public torch::nn::Module {
 public:
  explicit RecomputedBlockImpl(std::shared_ptr<BlockImpl> block) : block_(register_module("block", std::move(block))) {}
  torch::Tensor forward(const torch::Tensor& x) { return run(block_, x); }
  // `block` on `x`: volt::checkpoint while it trains, its plain forward otherwise.
  static torch::Tensor run(const std::shared_ptr<BlockImpl>& block, const torch::Tensor& x) {
    return block->is_training() ? volt::checkpoint(block, x) : block->forward(x);
  }

 private:
  std::shared_ptr<BlockImpl> block_;
};
TORCH_MODULE(RecomputedBlock);

// The block behind a Sequential entry; fsdp's auto-wrap replaces the blocks by its units, whose
// gathered parameters a recompute would need again: not supported yet.
std::shared_ptr<BlockImpl> block_of(const torch::nn::AnyModule& entry) {
  auto block = std::dynamic_pointer_cast<BlockImpl>(entry.ptr());
  TORCH_CHECK(block != nullptr, "GPT: activation checkpointing needs the blocks themselves, got a ",
              entry.ptr()->name(), "; use it with single_device, ddp or pipeline");
  return block;
}

}  // namespace

EmbeddingLayerImpl::EmbeddingLayerImpl(torch::nn::Embedding wte, torch::nn::Embedding wpe, torch::nn::Dropout dropout,
                                       int64_t block_size)
    : wte_(register_module("wte", std::move(wte))),
      wpe_(register_module("wpe", std::move(wpe))),
      dropout_(register_module("dropout", std::move(dropout))),
      block_size_(block_size) {}

torch::Tensor EmbeddingLayerImpl::forward(const torch::Tensor& idx) {
  const int64_t time = idx.size(1);
  TORCH_CHECK(time <= block_size_, "GPT: a sequence of ", time, " tokens is longer than the context (", block_size_,
              ")");
  const auto positions = torch::arange(time, torch::dtype(torch::kLong).device(idx.device()));
  return dropout_->forward(wte_->forward(idx) + wpe_->forward(positions));
}

OutputLayerImpl::OutputLayerImpl(torch::nn::LayerNorm ln_f, torch::nn::Embedding wte)
    : ln_f_(register_module("ln_f", std::move(ln_f))), wte_(std::move(wte)) {}

torch::Tensor OutputLayerImpl::forward(const torch::Tensor& x) {
  return torch::nn::functional::linear(ln_f_->forward(x), wte_->weight);  // tied output projection
}

torch::Tensor GPTImpl::forward(const torch::Tensor& idx) {
  auto x = embedding_->forward(idx);
  if (config_.activation_checkpointing && is_training()) {
    for (const auto& entry : *blocks_) x = RecomputedBlockImpl::run(block_of(entry), x);
  } else {
    x = blocks_->forward(x);
  }
  return output_->forward(x);
}

torch::nn::Sequential GPTImpl::pipeline_layers() const {
  torch::nn::Sequential layers;
  layers->push_back(embedding_);
  for (const auto& entry : *blocks_) {
    if (config_.activation_checkpointing) {
      layers->push_back(RecomputedBlock(block_of(entry)));
    } else {
      layers->push_back(entry);
    }
  }
  layers->push_back(output_);
  return layers;
}

torch::Tensor next_token_loss(const torch::Tensor& logits, const torch::Tensor& target) {
  return torch::nn::functional::cross_entropy(logits.view({-1, logits.size(-1)}), target.view({-1}));
}

std::string tensor_parallel_plan(const std::string& path) {
  const std::string blocks = path + ".blocks.*.";
  return blocks + "attention.qkv:colwise:3|" + blocks + "attention.proj:rowwise|" + blocks + "fc:colwise|" + blocks +
         "proj:rowwise";
}

double flops_per_token(const GPTConfig& config, int64_t parameters) {
  const double non_embedding = static_cast<double>(parameters - config.block_size * config.n_embd);
  return 6.0 * non_embedding + 12.0 * static_cast<double>(config.n_layer * config.n_embd * config.block_size);
}

}  // namespace gpt
