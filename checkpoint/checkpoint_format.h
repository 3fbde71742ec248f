#pragma once
// The bytes of a volt checkpoint file: a torch.save-compatible archive plus an integrity record.
#include <c10/core/ScalarType.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/state_dict.h"

namespace caffe2::serialize {
class ReadAdapterInterface;
}

namespace volt {

// Note [Checkpoint file format]
// A checkpoint file is the zip archive that torch.save writes, so Python's torch.load reads it:
//   archive/data.pkl        pickle (protocol 2) of a plain dict with str keys. No TorchScript type
//                           tags and no typed lists, so torch.load(weights_only=True) accepts it.
//   archive/data/<i>        the i-th tensor storage (raw bytes, CPU, 64-byte aligned)
//   archive/version         the zip container's version, as PyTorch writes it
//   archive/volt_integrity  volt's own record (text, one "key value" per line): format_version,
//                           crc32c (hex, of data.pkl then data/0 ... data/<records-1> in order),
//                           bytes (their total size), records (the number of data/<i>), and for
//                           reading parts (Note [Reading parts of a checkpoint]) pickle_crc32c
//                           (of data.pkl), block_bytes and block_crc32c_<i> (the CRC of each
//                           block_bytes of data/<i>, comma-separated; "-" when it is empty).
// Neither LibTorch's zip reader nor torch.load checks the zip's own CRCs, so without the
// integrity record a flipped byte inside a tensor would load silently. torch.load ignores
// records it does not know. format_version rises whenever a reader of the previous version
// would misread a new file; a reader refuses a version newer than its own.
inline constexpr int64_t kCheckpointFormatVersion = 1;
inline constexpr const char* kIntegrityRecord = "volt_integrity";

// Note [Reading parts of a checkpoint]
// A rank that resumes a sharded checkpoint under another world size needs slices of the tensors,
// not whole files (Note [Reading a sharded checkpoint anywhere]). read_checkpoint_archive_lazily
// reads only data.pkl (verified by its own CRC) and leaves the tensors of chosen sections unread:
// each is a placeholder, an empty tensor of its shape and dtype on the meta device (no memory;
// an attempt to read its values fails loudly), with where its bytes lie. A slice is then read
// with pread, block by block: each block it touches is read whole and checked against its CRC,
// so a flipped byte is caught however the file is read, at the price of at most one block more
// on each side of a slice (the last block read is kept, so consecutive slices, such as the
// parameters of one flat, read a block they share once). A file of a volt from before block
// CRCs is verified whole on opening.
inline constexpr size_t kCheckpointBlockBytes = size_t{256} << 10;

// Random access to a checkpoint file's tensor records, verifying block CRCs. Thread-safe.
class CheckpointFileReader {
 public:
  CheckpointFileReader(std::shared_ptr<caffe2::serialize::ReadAdapterInterface> input, std::string source,
                       uint64_t block_bytes);
  // Copies bytes [offset, offset + size) of record data/<record> into `destination`; throws
  // CheckpointError naming the file when a block's CRC differs or the file ends early.
  void read(int64_t record, uint64_t offset, uint64_t size, void* destination) const;
  const std::string& source() const { return source_; }
  // Bytes read from the file so far for read(): what was asked plus the rest of the blocks.
  uint64_t bytes_read() const { return bytes_read_.load(); }
  // The same, summed over every reader of this process since it started: what a load read, as
  // the difference of two calls, after its readers are gone.
  static uint64_t bytes_read_in_process();

 private:
  friend struct LazyArchiveParts;
  struct Record {
    uint64_t file_offset = 0, size = 0;
    std::vector<uint32_t> block_crcs;  // empty: verified when the file was opened
  };
  std::shared_ptr<caffe2::serialize::ReadAdapterInterface> input_;
  std::string source_;
  uint64_t block_bytes_;
  std::map<int64_t, Record> records_;
  mutable std::atomic<uint64_t> bytes_read_{0};
  // The last block read and verified: (record, block index) and its bytes.
  mutable std::mutex last_mutex_;
  mutable std::pair<int64_t, uint64_t> last_block_{-1, 0};
  mutable std::vector<char> last_bytes_;
};

// Where a tensor left unread lies: `numel` elements of `dtype` from `byte_offset` in a record.
struct TensorInFile {
  std::shared_ptr<const CheckpointFileReader> file;
  int64_t record = 0;
  uint64_t byte_offset = 0;
  int64_t numel = 0;
  c10::ScalarType dtype = c10::ScalarType::Float;
};

// A checkpoint's dict whose tensors under the top-level keys `lazy_sections` are placeholders
// (see the Note), each found in `placeholders` by its TensorImpl (the dict keeps it alive).
struct LazyCheckpoint {
  StateDict content;
  std::shared_ptr<const CheckpointFileReader> file;
  std::map<const void*, TensorInFile> placeholders;
};

// As read_checkpoint_archive (integrity required), with the tensors of `lazy_sections` left in
// the file (Note [Reading parts of a checkpoint]). Non-contiguous tensors are read at once.
LazyCheckpoint read_checkpoint_archive_lazily(const std::shared_ptr<caffe2::serialize::ReadAdapterInterface>& input,
                                              const std::string& source,
                                              const std::vector<std::string>& lazy_sections);

// Receives the archive's bytes in order; returns how many it took (fewer means it failed).
using ArchiveSink = std::function<size_t(const void* data, size_t size)>;

// Serializes `state` (tensors are detached and copied to the CPU; typed lists become plain lists)
// through `sink`. `format_version` is recorded as given: only tests and migrations pass another.
// Throws CheckpointError when the sink fails or a value cannot be pickled.
void write_checkpoint_archive(const StateDict& state, const ArchiveSink& sink,
                              int64_t format_version = kCheckpointFormatVersion);

// Reads an archive, verifies it and returns its dict with every tensor on the CPU. `source` names
// it in messages. Throws CheckpointError for a truncated or non-zip input, a missing integrity
// record (unless `require_integrity` is false: then a plain torch.save file of a dict is read
// unverified), a checksum mismatch, or a newer format version.
StateDict read_checkpoint_archive(const std::shared_ptr<caffe2::serialize::ReadAdapterInterface>& input,
                                  const std::string& source, bool require_integrity = true);

}  // namespace volt
