#pragma once
// The GPT example's data preparation: a UTF-8 text file as byte-level tokens (each byte its own
// id, 0..255: no tokenizer to ship, every text representable), in nanoGPT's file format (a flat
// array of uint16 ids, volt::MemmapTokenDataset's default), split into train.bin and val.bin.
#include <cstdint>
#include <string>

namespace gpt {

struct ByteTokenFiles {
  int64_t train_tokens = 0, val_tokens = 0;
};

// The byte offset of the first byte of `bytes` that does not belong to a well-formed UTF-8
// sequence (an overlong form, a surrogate, a code point past U+10FFFF, a cut sequence), or -1.
int64_t first_invalid_utf8(const std::string& bytes);

// Writes `text_path`'s bytes as tokens: the first (1 - val_fraction) into out_dir/train.bin, the
// rest into out_dir/val.bin (out_dir is created). Throws std::runtime_error naming the file for
// one that cannot be read, is empty, is not UTF-8 (with the offset) or is too short to give both
// files `min_tokens` tokens each, and std::invalid_argument for val_fraction outside (0, 1).
ByteTokenFiles write_byte_tokens(const std::string& text_path, const std::string& out_dir, double val_fraction,
                                 int64_t min_tokens);

}  // namespace gpt
