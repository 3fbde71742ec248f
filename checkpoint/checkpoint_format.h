#pragma once
// The bytes of a volt checkpoint file: a torch.save-compatible archive plus an integrity record.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

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
//                           bytes (their total size) and records (the number of data/<i>).
// Neither LibTorch's zip reader nor torch.load checks the zip's own CRCs, so without the
// integrity record a flipped byte inside a tensor would load silently. torch.load ignores
// records it does not know. format_version rises whenever a reader of the previous version
// would misread a new file; a reader refuses a version newer than its own.
inline constexpr int64_t kCheckpointFormatVersion = 1;
inline constexpr const char* kIntegrityRecord = "volt_integrity";

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
