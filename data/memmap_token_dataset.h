#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "data/dataset.h"
#include "data/memory_mapped_file.h"

namespace volt {

// How token ids are stored in the file: nanoGPT's train.bin is uint16 (vocabularies up to 65,536).
enum class TokenDtype { UInt16, UInt32 };

struct MemmapTokenOptions {
  std::string path;                        // a flat file of token ids, no header
  TokenDtype dtype = TokenDtype::UInt16;
  int64_t block_size = 1024;               // tokens per sample (the context length); >= 1
  // Sequential: sample i is the window starting at token i × block_size (every token in one
  // window per epoch; shuffle the loader for another order). Random: each sample starts at an
  // offset drawn uniformly from [0, tokens - block_size) by its own random stream (nanoGPT's
  // get_batch), overlapping freely.
  enum class Windows { Sequential, Random };
  Windows windows = Windows::Sequential;
  // Random windows: samples per epoch (0: tokens / block_size, one epoch ≈ one pass).
  int64_t samples_per_epoch = 0;
  // > 0: every id read must be below it; a larger one is a DataError naming the file and token
  // position (an out-of-range id would otherwise reach the embedding: a crash on a GPU).
  int64_t vocab_size = 0;
  void validate() const;
};

// A language model's token file, memory-mapped (MemoryMappedFile: nothing is read up front, the
// pages come from the page cache and are shared by every rank and worker), yielding (input,
// target) windows: input = tokens [s, s + block_size), target = tokens [s + 1, s + block_size + 1),
// both int64 of shape [batch, block_size]. A batch is built straight into its tensors (pinned ones
// when the loader pins). Thread-safe.
class MemmapTokenDataset : public Dataset {
 public:
  explicit MemmapTokenDataset(MemmapTokenOptions options);
  int64_t size() const override { return samples_; }
  Batch get_batch(const BatchRequest& request) const override;

  int64_t num_tokens() const { return tokens_; }
  // The token at `position` (tests, tools).
  int64_t token(int64_t position) const;
  // Where sample `index` of a request starts (its window's first token).
  int64_t window_start(int64_t index, const BatchRequest& request, size_t position) const;

 private:
  MemmapTokenOptions options_;
  std::shared_ptr<const MemoryMappedFile> file_;
  int64_t tokens_ = 0;
  int64_t samples_ = 0;
};

}  // namespace volt
