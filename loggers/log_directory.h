#pragma once
#include <cstdint>
#include <string>

namespace volt {

// The directory layout loggers share (Lightning's): <save_dir>/<name>/version_<N>. With no
// version given, N is one past the largest version_<k> that exists (0 when none does).
class LogDirectory {
 public:
  LogDirectory(std::string save_dir, std::string name, int64_t version = -1);
  int64_t version() const;        // resolved on first call, then fixed
  void set_version(int64_t version);  // fixes it (>= 0) without looking at the disk
  std::string path() const;       // <save_dir>/<name>/version_<N>
  void create() const;            // mkdir -p path()

 private:
  std::string save_dir_, name_;
  mutable int64_t version_;
};

}  // namespace volt
