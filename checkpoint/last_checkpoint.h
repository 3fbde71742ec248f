#pragma once
#include <filesystem>
#include <string>
#include <vector>

namespace volt {

// What `ckpt_path = "last"` resumes from.
struct LastCheckpoint {
  std::filesystem::path path;  // empty when there is none
  // Newer candidates passed over because they are not complete, one "<path>: <why>" each.
  std::vector<std::string> skipped;
};

// Among the checkpoint directories under `root_dir` (<root>/checkpoints, <root>/<name>/checkpoints
// and <root>/<name>/version_<N>/checkpoints, i.e. every logger's versions) and `extra_dirs`, the
// most recently modified last.ckpt (or last-v<N>.ckpt) that is complete; when there is none, the
// most recently modified complete *.ckpt. Complete: a file whose archive and integrity record
// read back (its tensors are checked when they are read); a sharded directory whose every shard
// is present and of one save (load_shards). Hidden entries (temporary files of unfinished writes,
// checkpoints being removed: Note [Removing a checkpoint]) never count.
LastCheckpoint find_last_checkpoint(const std::filesystem::path& root_dir,
                                    const std::vector<std::filesystem::path>& extra_dirs = {});

}  // namespace volt
