#include "checkpoint/last_checkpoint.h"

#include <algorithm>
#include <deque>
#include <regex>
#include <set>

#include "checkpoint/checkpoint_io.h"
#include "checkpoint/shard_index.h"
#include "core/error.h"

namespace fs = std::filesystem;

namespace volt {
namespace {

std::vector<fs::path> subdirectories(const fs::path& directory) {
  std::vector<fs::path> out;
  std::error_code error;
  for (fs::directory_iterator it(directory, error), end; !error && it != end; it.increment(error)) {
    std::error_code ignored;
    if (it->is_directory(ignored) && it->path().filename().string().rfind('.', 0) != 0) out.push_back(it->path());
  }
  return out;
}

std::set<fs::path> checkpoint_directories(const fs::path& root, const std::vector<fs::path>& extra) {
  static const std::regex version("version_[0-9]+");
  std::set<fs::path> out(extra.begin(), extra.end());
  out.insert(root / "checkpoints");
  for (const auto& named : subdirectories(root)) {
    out.insert(named / "checkpoints");
    for (const auto& child : subdirectories(named)) {
      if (std::regex_match(child.filename().string(), version)) out.insert(child / "checkpoints");
    }
  }
  return out;
}

// Why `path` is not a complete checkpoint ("" when it is).
std::string incompleteness(const fs::path& path) {
  CheckpointIO io;
  try {
    std::error_code error;
    if (fs::is_directory(path, error)) {
      std::deque<LazyCheckpoint> shards;
      load_shards(path, [&](const fs::path& file) -> const StateDict& {
        shards.push_back(io.load_lazily(file, {"state_dict", "optimizer_states"}));
        return shards.back().content;
      });
    } else {
      io.load_lazily(path, {"state_dict", "optimizer_states"});
    }
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace

LastCheckpoint find_last_checkpoint(const fs::path& root_dir, const std::vector<fs::path>& extra_dirs) {
  static const std::regex last_name("last(-v[0-9]+)?\\.ckpt");
  struct Candidate {
    fs::path path;
    fs::file_time_type time;
    bool last = false;
  };
  std::vector<Candidate> candidates;
  for (const auto& directory : checkpoint_directories(root_dir, extra_dirs)) {
    std::error_code error;
    for (fs::directory_iterator it(directory, error), end; !error && it != end; it.increment(error)) {
      const std::string name = it->path().filename().string();
      if (name.rfind('.', 0) == 0 || it->path().extension() != ".ckpt") continue;
      std::error_code time_error;
      const auto time = fs::last_write_time(it->path(), time_error);
      if (!time_error) candidates.push_back({it->path(), time, std::regex_match(name, last_name)});
    }
  }
  // last.ckpt first, then the others; newest first within each.
  std::sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
    return a.last != b.last ? a.last : a.time > b.time;
  });
  LastCheckpoint found;
  for (const auto& candidate : candidates) {
    const std::string why = incompleteness(candidate.path);
    if (why.empty()) {
      found.path = candidate.path;
      break;
    }
    found.skipped.push_back(candidate.path.string() + ": " + why);
  }
  return found;
}

}  // namespace volt
