#pragma once
// A GPT-2-style decoder (Radford et al. 2019, as nanoGPT writes it): token and position
// embeddings, pre-LayerNorm blocks of causal self-attention and a 4x GELU MLP, a final LayerNorm,
// and logits through the token embedding's own weights (tied). The blocks are the entries of a
// Sequential with a Tensor -> Tensor forward, so fsdp's auto-wrap makes each one a unit. The
// blocks' linears are called through volt::call, so that tensor_parallel can split them (the
// plan tensor_parallel_plan() below).
#include <torch/torch.h>

#include <string>

namespace gpt {

struct GPTConfig {
  int64_t n_layer = 12;
  int64_t n_head = 12;
  int64_t n_embd = 768;
  int64_t block_size = 1024;   // context length
  int64_t vocab_size = 50304;  // GPT-2's 50257 rounded up to a multiple of 64
  double dropout = 0.0;
  // Recompute each block's forward in the backward instead of keeping its activations
  // (volt::checkpoint): a block's saved activations shrink to its input, for one more forward.
  bool activation_checkpointing = false;

  // "gpt2": the 124M shape above. "cpu": 4 layers, 4 heads, d128, context 128, a byte vocabulary
  // (256), sized to train on a CPU in minutes. Throws std::invalid_argument naming the presets.
  static GPTConfig preset(const std::string& name);
  // Throws std::invalid_argument for sizes < 1, n_embd not divisible by n_head, dropout outside [0, 1).
  void validate() const;
};

class CausalSelfAttentionImpl : public torch::nn::Module {
 public:
  explicit CausalSelfAttentionImpl(const GPTConfig& config);
  torch::Tensor forward(const torch::Tensor& x);

 private:
  int64_t head_dim_;
  double dropout_;
  torch::nn::Linear qkv_{nullptr}, proj_{nullptr};
  torch::nn::Dropout residual_dropout_{nullptr};
};
TORCH_MODULE(CausalSelfAttention);

class BlockImpl : public torch::nn::Module {
 public:
  explicit BlockImpl(const GPTConfig& config);
  torch::Tensor forward(const torch::Tensor& x);

 private:
  torch::nn::LayerNorm ln_1_{nullptr}, ln_2_{nullptr};
  CausalSelfAttention attention_{nullptr};
  torch::nn::Linear fc_{nullptr}, proj_{nullptr};
  torch::nn::Dropout dropout_{nullptr};
};
TORCH_MODULE(Block);

class GPTImpl : public torch::nn::Module {
 public:
  explicit GPTImpl(const GPTConfig& config);
  // Token ids [batch, time] (time <= block_size) -> logits [batch, time, vocab_size].
  torch::Tensor forward(const torch::Tensor& idx);
  const GPTConfig& config() const { return config_; }

 private:
  GPTConfig config_;
  torch::nn::Embedding wte_{nullptr}, wpe_{nullptr};
  torch::nn::Dropout dropout_{nullptr};
  torch::nn::Sequential blocks_{nullptr};
  torch::nn::LayerNorm ln_f_{nullptr};
};
TORCH_MODULE(GPT);

// The tensor_parallel plan of Megatron-LM's split of these blocks, for a GPT at module path
// `path` ("model" in GPTModule): attention's fused q|k|v projection colwise per part (each rank
// its heads) and its output projection rowwise, the MLP's first linear colwise and its second
// rowwise: two all-reduces of activations per block forward, two backward. The embeddings,
// LayerNorms and tied output projection stay whole.
std::string tensor_parallel_plan(const std::string& path);

// Scaled dot-product attention with a causal mask on [batch, heads, time, head_dim] tensors: the
// fused kernel (flash or memory-efficient attention where the device has one) on LibTorch 2.x,
// the same computation written out on 1.13, which has no public SDPA.
torch::Tensor causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, double dropout);

// The model's FLOPs per token for a forward and backward pass: 6 per parameter (non-embedding
// weights and the tied output projection) plus the attention's 12 · layers · d · context
// (PaLM, appendix B), the figure MFU is computed with.
double flops_per_token(const GPTConfig& config, int64_t parameters);

}  // namespace gpt
