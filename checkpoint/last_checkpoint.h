#pragma once
#include <filesystem>
#include <vector>

namespace volt {

// What `ckpt_path = "last"` resumes from: among the checkpoint directories under `root_dir`
// (<root>/checkpoints, <root>/<name>/checkpoints and <root>/<name>/version_<N>/checkpoints, i.e.
// every logger's versions) and `extra_dirs`, the most recently modified last.ckpt (or
// last-v<N>.ckpt); when there is none, the most recently modified *.ckpt. Hidden entries
// (temporary files of unfinished writes) never count. Empty when nothing is found.
std::filesystem::path find_last_checkpoint(const std::filesystem::path& root_dir,
                                           const std::vector<std::filesystem::path>& extra_dirs = {});

}  // namespace volt
