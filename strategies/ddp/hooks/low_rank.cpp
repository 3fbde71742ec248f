#include "strategies/ddp/hooks/low_rank.h"

#include "core/error.h"

namespace volt::ddp {

bool worth_compressing(int64_t n, int64_t m, int64_t rank, double min_compression_rate) {
  return static_cast<double>((n + m) * rank) * min_compression_rate < static_cast<double>(n * m);
}

namespace {

void gram_schmidt(torch::Tensor& matrices, double epsilon) {
  const int64_t columns = matrices.size(2);
  for (int64_t i = 0; i < columns; ++i) {
    auto column = matrices.narrow(2, i, 1);
    auto norm = at::linalg_vector_norm(column, 2, std::vector<int64_t>{1}, /*keepdim=*/true, c10::nullopt);
    if (epsilon != 0) norm = norm + epsilon;
    column.div_(norm);
    if (i + 1 < columns) {
      auto rest = matrices.narrow(2, i + 1, columns - i - 1);
      rest.sub_(torch::sum(column * rest, /*dim=*/{1}, /*keepdim=*/true) * column);
    }
  }
}

}  // namespace

void orthogonalize(torch::Tensor& matrices, double epsilon) {
  VOLT_INTERNAL_ASSERT(matrices.dim() == 3 && matrices.size(2) <= matrices.size(1),
                       "orthogonalize takes [batch, rows, rank] with rank <= rows, got ", matrices.sizes());
  const auto dtype = matrices.scalar_type();
  if (matrices.size(2) <= 2 || dtype == torch::kHalf || dtype == torch::kBFloat16) {
    gram_schmidt(matrices, epsilon);
    return;
  }
  matrices.copy_(std::get<0>(torch::linalg_qr(matrices)));
}

}  // namespace volt::ddp
