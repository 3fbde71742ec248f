#pragma once
// A GPT-2-style decoder (Radford et al. 2019, as nanoGPT writes it): token and position
// embeddings, pre-LayerNorm blocks of causal self-attention and a 4x GELU MLP, a final LayerNorm,
// and logits through the token embedding's own weights (tied). The blocks are the entries of a
// Sequential with a Tensor -> Tensor forward, so fsdp's auto-wrap makes each one a unit. The
// blocks' linears are called through volt::call, so that tensor_parallel can split them (the
// plan tensor_parallel_plan() below). pipeline_layers() gives the pipeline strategy the model as
// one Sequential: the embeddings, the blocks, the final LayerNorm with the tied projection, which
// reads the token embedding's weight on whichever stage runs it (pipeline_shared_parameters()).
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

// Token ids [batch, time] -> the token plus position embeddings, through dropout: the model's
// first layer. It registers the GPT's own modules (the GPT registers them too, under its names).
class EmbeddingLayerImpl : public torch::nn::Module {
 public:
  EmbeddingLayerImpl(torch::nn::Embedding wte, torch::nn::Embedding wpe, torch::nn::Dropout dropout,
                     int64_t block_size);
  torch::Tensor forward(const torch::Tensor& idx);

 private:
  torch::nn::Embedding wte_, wpe_;
  torch::nn::Dropout dropout_;
  int64_t block_size_;
};
TORCH_MODULE(EmbeddingLayer);

// The last layer: the final LayerNorm, then logits through the token embedding's weight, which it
// reads but does not register (the embedding layer does; registering it twice would have
// optimizers step it twice).
class OutputLayerImpl : public torch::nn::Module {
 public:
  OutputLayerImpl(torch::nn::LayerNorm ln_f, torch::nn::Embedding wte);
  torch::Tensor forward(const torch::Tensor& x);
  const torch::Tensor& tied_weight() const { return wte_->weight; }

 private:
  torch::nn::LayerNorm ln_f_;
  torch::nn::Embedding wte_;  // not registered
};
TORCH_MODULE(OutputLayer);

class GPTImpl : public torch::nn::Module {
 public:
  explicit GPTImpl(const GPTConfig& config);
  // Token ids [batch, time] (time <= block_size) -> logits [batch, time, vocab_size].
  torch::Tensor forward(const torch::Tensor& idx);
  const GPTConfig& config() const { return config_; }
  // The model as the layers forward runs, in order: the embedding layer, the blocks (each through
  // volt::checkpoint in training with activation checkpointing), the output layer. A new
  // Sequential of the model's own modules on each call.
  torch::nn::Sequential pipeline_layers() const;
  // The output layer reads the token embedding's weight: layer n_layer + 1 of pipeline_layers().
  int64_t output_layer_index() const { return config_.n_layer + 1; }
  const torch::Tensor& tied_weight() const { return output_->tied_weight(); }

 private:
  GPTConfig config_;
  torch::nn::Embedding wte_{nullptr}, wpe_{nullptr};
  torch::nn::Dropout dropout_{nullptr};
  torch::nn::Sequential blocks_{nullptr};
  torch::nn::LayerNorm ln_f_{nullptr};
  EmbeddingLayer embedding_{nullptr};  // over wte_, wpe_ and dropout_; not registered here
  OutputLayer output_{nullptr};        // over ln_f_ and wte_; not registered here
};
TORCH_MODULE(GPT);

// The tensor_parallel plan of Megatron-LM's split of these blocks, for a GPT at module path
// `path` ("model" in GPTModule): attention's fused q|k|v projection colwise per part (each rank
// its heads) and its output projection rowwise, the MLP's first linear colwise and its second
// rowwise: two all-reduces of activations per block forward, two backward. The embeddings,
// LayerNorms and tied output projection stay whole.
std::string tensor_parallel_plan(const std::string& path);

// The mean next-token cross-entropy of `logits` [batch, time, vocab] against `target` [batch, time].
torch::Tensor next_token_loss(const torch::Tensor& logits, const torch::Tensor& target);

// Scaled dot-product attention with a causal mask on [batch, heads, time, head_dim] tensors: the
// fused kernel (flash or memory-efficient attention where the device has one) on LibTorch 2.x,
// the same computation written out on 1.13, which has no public SDPA.
torch::Tensor causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, double dropout);

// The model's FLOPs per token for a forward and backward pass: 6 per parameter (non-embedding
// weights and the tied output projection) plus the attention's 12 · layers · d · context
// (PaLM, appendix B), the figure MFU is computed with.
double flops_per_token(const GPTConfig& config, int64_t parameters);

}  // namespace gpt
