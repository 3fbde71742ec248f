#include "fashion_mnist/idx_reader.h"

#include <zlib.h>

#include <array>
#include <filesystem>
#include <memory>

#include "core/error.h"

namespace fashion_mnist {
namespace {

struct GzCloser {
  void operator()(gzFile file) const { gzclose(file); }
};

uint32_t big_endian(const std::array<unsigned char, 4>& bytes) {
  return (uint32_t{bytes[0]} << 24) | (uint32_t{bytes[1]} << 16) | (uint32_t{bytes[2]} << 8) | bytes[3];
}

}  // namespace

torch::Tensor read_idx(const std::string& path) {
  using volt::DataError;
  volt::check<DataError>(std::filesystem::exists(path), "Fashion-MNIST: '", path,
                         "' does not exist; install the Debian package dataset-fashion-mnist "
                         "(apt-get install dataset-fashion-mnist) or pass --data-dir");
  // gzread reads plain files too, so .gz and decompressed files both work.
  std::unique_ptr<gzFile_s, GzCloser> file(gzopen(path.c_str(), "rb"));
  volt::check<DataError>(file != nullptr, "Fashion-MNIST: cannot open '", path, "'");
  auto read_exact = [&](void* out, size_t bytes) {
    size_t done = 0;
    while (done < bytes) {
      const int n = gzread(file.get(), static_cast<char*>(out) + done,
                           static_cast<unsigned>(std::min<size_t>(bytes - done, 1u << 30)));
      volt::check<DataError>(n > 0, "Fashion-MNIST: '", path, "' is truncated or corrupt (expected ",
                             bytes, " bytes of data, got ", done, ")");
      done += static_cast<size_t>(n);
    }
  };
  std::array<unsigned char, 4> word{};
  read_exact(word.data(), 4);
  volt::check<DataError>(word[0] == 0 && word[1] == 0 && word[2] == 0x08 && word[3] >= 1 && word[3] <= 4,
                         "Fashion-MNIST: '", path, "' is not an IDX file of unsigned bytes");
  std::vector<int64_t> sizes;
  int64_t total = 1;
  for (int d = 0; d < word[3]; ++d) {
    std::array<unsigned char, 4> size{};
    read_exact(size.data(), 4);
    sizes.push_back(big_endian(size));
    total *= sizes.back();
  }
  volt::check<DataError>(total > 0 && total < (int64_t{1} << 34), "Fashion-MNIST: '", path,
                         "' declares an implausible size");
  auto data = torch::empty(sizes, torch::kUInt8);
  read_exact(data.data_ptr<uint8_t>(), static_cast<size_t>(total));
  return data;
}

}  // namespace fashion_mnist
