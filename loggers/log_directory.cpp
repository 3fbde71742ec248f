#include "loggers/log_directory.h"

#include <filesystem>
#include <regex>

#include "core/error.h"

namespace fs = std::filesystem;

namespace volt {

LogDirectory::LogDirectory(std::string save_dir, std::string name, int64_t version)
    : save_dir_(std::move(save_dir)), name_(std::move(name)),
      version_(version >= 0 ? version : next_free_version(save_dir_, name_)) {
  check<ConfigurationError>(version >= -1, "Logger: expected version -1 (the next free one) or >= 0, got ",
                            version);
}

int64_t LogDirectory::next_free_version(const std::string& save_dir, const std::string& name) {
  int64_t next = 0;
  const fs::path root = fs::path(save_dir) / name;
  std::error_code ignored;
  if (fs::is_directory(root, ignored)) {
    static const std::regex pattern("version_([0-9]+)");
    for (const auto& entry : fs::directory_iterator(root)) {
      std::smatch match;
      const auto leaf = entry.path().filename().string();
      if (entry.is_directory() && std::regex_match(leaf, match, pattern)) {
        next = std::max<int64_t>(next, std::stoll(match[1].str()) + 1);
      }
    }
  }
  return next;
}

void LogDirectory::set_version(int64_t version) {
  check<ConfigurationError>(version >= 0, "LogDirectory: expected a version >= 0, got ", version);
  version_ = version;
}

std::string LogDirectory::path() const {
  return (fs::path(save_dir_) / name_ / ("version_" + std::to_string(version()))).string();
}

void LogDirectory::create() const {
  std::error_code error;
  fs::create_directories(path(), error);
  check<ConfigurationError>(!error, "Logger: cannot create log directory '", path(), "': ",
                            error.message(), "; check --default-root-dir");
}

}  // namespace volt
