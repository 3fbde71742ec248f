#include "gpt/byte_tokens.h"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <vector>

namespace gpt {
namespace {

void write_tokens(const std::string& bytes, size_t begin, size_t end, const std::filesystem::path& path) {
  std::vector<uint16_t> tokens;
  tokens.reserve(end - begin);
  for (size_t i = begin; i < end; ++i) tokens.push_back(static_cast<unsigned char>(bytes[i]));
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(tokens.data()),
            static_cast<std::streamsize>(tokens.size() * sizeof(uint16_t)));
  if (!out) throw std::runtime_error("gpt_prepare: could not write " + path.string());
}

}  // namespace

int64_t first_invalid_utf8(const std::string& bytes) {
  const auto* s = reinterpret_cast<const unsigned char*>(bytes.data());
  const size_t n = bytes.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char c = s[i];
    size_t length = 0;
    uint32_t code = 0, smallest = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      length = 2, code = c & 0x1F, smallest = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
      length = 3, code = c & 0x0F, smallest = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
      length = 4, code = c & 0x07, smallest = 0x10000;
    } else {
      return static_cast<int64_t>(i);
    }
    if (i + length > n) return static_cast<int64_t>(i);
    for (size_t k = 1; k < length; ++k) {
      if ((s[i + k] & 0xC0) != 0x80) return static_cast<int64_t>(i);
      code = (code << 6) | (s[i + k] & 0x3F);
    }
    if (code < smallest || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) return static_cast<int64_t>(i);
    i += length;
  }
  return -1;
}

ByteTokenFiles write_byte_tokens(const std::string& text_path, const std::string& out_dir, double val_fraction,
                                 int64_t min_tokens) {
  if (!(val_fraction > 0 && val_fraction < 1)) {
    throw std::invalid_argument("gpt_prepare: --val-fraction must be in (0, 1), got " + std::to_string(val_fraction));
  }
  std::ifstream in(text_path, std::ios::binary);
  if (!in) throw std::runtime_error("gpt_prepare: cannot read the text file '" + text_path + "'");
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.empty()) throw std::runtime_error("gpt_prepare: the text file '" + text_path + "' is empty");
  if (const int64_t bad = first_invalid_utf8(bytes); bad >= 0) {
    throw std::runtime_error("gpt_prepare: '" + text_path + "' is not UTF-8 text: byte " + std::to_string(bad) +
                             " starts no valid UTF-8 sequence; convert it first (iconv -t UTF-8)");
  }
  const auto split = static_cast<size_t>(static_cast<double>(bytes.size()) * (1.0 - val_fraction));
  ByteTokenFiles files{static_cast<int64_t>(split), static_cast<int64_t>(bytes.size() - split)};
  if (files.train_tokens < min_tokens || files.val_tokens < min_tokens) {
    throw std::runtime_error("gpt_prepare: '" + text_path + "' has " + std::to_string(bytes.size()) +
                             " bytes, which split into " + std::to_string(files.train_tokens) + " training and " +
                             std::to_string(files.val_tokens) + " validation tokens; each needs at least " +
                             std::to_string(min_tokens) + " (one sample of the context and its next token)");
  }
  std::filesystem::create_directories(out_dir);
  write_tokens(bytes, 0, split, std::filesystem::path(out_dir) / "train.bin");
  write_tokens(bytes, split, bytes.size(), std::filesystem::path(out_dir) / "val.bin");
  return files;
}

}  // namespace gpt
