#pragma once
// Note [Sparse gradients]
// An Embedding or EmbeddingBag built with sparse=true (or torch::embedding(..., sparse=true))
// gives its weight a sparse gradient: the rows a batch touched, as indices and values. volt's
// distributed strategies reduce gradients as dense flat buffers (DDP's buckets, ShardedDDP's
// owner reduces, the window synchronization); a sparse gradient in them either fails deep inside
// an autograd hook ("copy_() between dense and sparse Tensors") or, copied into a bucket view,
// silently turns dense, which breaks optimizers built for sparse gradients (SparseAdam) and
// changes what SGD's momentum and weight decay do to rows a batch never touched. PyTorch's DDP
// reduces them with a sparse all_reduce, which c10d's Gloo has in 1.13 but volt's collectives do
// not carry. So distributed strategies refuse them: at setup for the modules that declare them,
// and at the first backward that produces one for any other source. One process (single_device)
// trains with sparse gradients as LibTorch does.
#include <torch/torch.h>

#include <string>

namespace volt {

// Throws NotSupportedError naming every submodule of `module` built to produce sparse gradients
// (Embedding / EmbeddingBag with sparse=true) and what to do; `strategy` names who refuses.
void refuse_sparse_gradient_modules(const torch::nn::Module& module, const std::string& strategy);

// Throws NotSupportedError when `parameter` (named `name`) holds a sparse gradient.
void check_dense_gradient(const torch::Tensor& parameter, const std::string& name, const std::string& strategy);

}  // namespace volt
