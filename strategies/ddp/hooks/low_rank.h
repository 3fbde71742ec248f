#pragma once
// The linear algebra of PowerSGD (Vogels et al., NeurIPS 2019), as PyTorch's powerSGD_hook does it:
// which gradients are worth compressing, and orthogonalizing a batch of low-rank factors.
#include <torch/torch.h>

#include <cstdint>

namespace volt::ddp {

// Whether an n×m gradient is worth a rank-r approximation: (n + m)·r·min_compression_rate < n·m,
// i.e. the factors P (n×r) and Q (m×r) are at least `min_compression_rate` times smaller.
bool worth_compressing(int64_t n, int64_t m, int64_t rank, double min_compression_rate);

// Orthogonalizes the columns of each matrix of `matrices` ([batch, rows, rank], rank <= rows) in
// place: Gram–Schmidt for rank <= 2 and for 16-bit floats (QR has no half-precision kernels),
// QR otherwise. `epsilon` is added to each column's norm before dividing (0: an all-zero column
// becomes NaN, as in PyTorch; set e.g. 1e-8 to avoid it).
void orthogonalize(torch::Tensor& matrices, double epsilon);

}  // namespace volt::ddp
