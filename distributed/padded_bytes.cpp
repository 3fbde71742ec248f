#include "distributed/padded_bytes.h"

#include <cstring>

namespace volt {

torch::Tensor padded_bytes(const std::string& bytes, int64_t length) {
  auto tensor = torch::zeros({length}, torch::kByte);
  std::memcpy(tensor.data_ptr<uint8_t>(), bytes.data(), bytes.size());
  return tensor;
}

std::vector<std::string> unpad_rows(const torch::Tensor& rows, const torch::Tensor& lengths) {
  std::vector<std::string> out;
  const auto* length = lengths.data_ptr<int64_t>();
  for (int64_t r = 0; r < lengths.numel(); ++r) {
    const auto row = rows[r];
    out.emplace_back(reinterpret_cast<const char*>(row.data_ptr<uint8_t>()), static_cast<size_t>(length[r]));
  }
  return out;
}

}  // namespace volt
