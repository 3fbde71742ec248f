#include "checkpoint/last_checkpoint.h"

#include <regex>
#include <set>

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

}  // namespace

fs::path find_last_checkpoint(const fs::path& root_dir, const std::vector<fs::path>& extra_dirs) {
  static const std::regex last_name("last(-v[0-9]+)?\\.ckpt");
  fs::path newest_last, newest_any;
  fs::file_time_type last_time{}, any_time{};
  for (const auto& directory : checkpoint_directories(root_dir, extra_dirs)) {
    std::error_code error;
    for (fs::directory_iterator it(directory, error), end; !error && it != end; it.increment(error)) {
      const std::string name = it->path().filename().string();
      if (name.rfind('.', 0) == 0 || it->path().extension() != ".ckpt") continue;
      std::error_code time_error;
      const auto time = fs::last_write_time(it->path(), time_error);
      if (time_error) continue;
      if (newest_any.empty() || time > any_time) newest_any = it->path(), any_time = time;
      if (std::regex_match(name, last_name) && (newest_last.empty() || time > last_time)) {
        newest_last = it->path(), last_time = time;
      }
    }
  }
  return newest_last.empty() ? newest_any : newest_last;
}

}  // namespace volt
