#pragma once
#include <filesystem>

#include "checkpoint/checkpoint_format.h"
#include "core/state_dict.h"

namespace volt {

// How checkpoint bytes reach storage (Lightning's CheckpointIO plugin). A Strategy holds one and
// calls it on the ranks that write or read; it knows nothing of ranks itself. The default writes
// local files atomically (AtomicFileWriter) in volt's format (Note [Checkpoint file format]) and
// verifies what it reads; a subclass may store elsewhere or write asynchronously.
// Not thread-safe.
class CheckpointIO {
 public:
  virtual ~CheckpointIO() = default;
  // Writes `checkpoint` to the file `path` (creating its directory). Throws CheckpointError, with
  // any previous file at `path` left as it was.
  virtual void save(const StateDict& checkpoint, const std::filesystem::path& path);
  // Reads and verifies the file `path`. Throws CheckpointError when it is missing, truncated,
  // damaged (checksum), not a checkpoint, or of a newer format version.
  virtual StateDict load(const std::filesystem::path& path);
  // Reads the file `path` leaving the tensors under the top-level keys `lazy_sections` in it, to
  // be read in parts later (Note [Reading parts of a checkpoint] in checkpoint_format.h); verifies
  // what it reads. Only CheckpointIO itself reads local files lazily: for a subclass (which may
  // store elsewhere and override load() alone) the default is load(path), every tensor read,
  // none left in a file. A subclass whose files are local or seekable overrides this to read lazily.
  virtual LazyCheckpoint load_lazily(const std::filesystem::path& path, const std::vector<std::string>& lazy_sections);
  // Removes the file or directory `path`, renamed out of the way first (Note [Removing a
  // checkpoint] in checkpoint_io.cpp); a path that does not exist is not an error.
  virtual void remove(const std::filesystem::path& path);
};

// Reads a dict from a torch.save file: a volt checkpoint (verified) or, with `require_integrity`
// false, also a plain torch.save(dict) file written by Python (read unverified).
StateDict read_checkpoint_file(const std::filesystem::path& path, bool require_integrity = true);

}  // namespace volt
