#pragma once
#include <cstdint>
#include <string>

#include "core/option_schema.h"

namespace volt {

// The directory layout loggers share (Lightning's): <save_dir>/<name>/version_<N>. With no
// version given, N is one past the largest version_<k> that exists (0 when none does), chosen
// when the object is built: loggers built together (a CSV and a TensorBoard logger of one
// Trainer) share one version directory; with several processes rank 0's N is broadcast
// (Trainer::agree_on_logger_versions) before rank 0 creates anything.
class LogDirectory {
 public:
  LogDirectory(std::string save_dir, std::string name, int64_t version = -1);
  int64_t version() const { return version_; }
  // Replaces the version chosen at construction (>= 0): under several processes every rank takes
  // global rank 0's choice, so they all write to one directory even if their disks differ.
  void set_version(int64_t version);
  std::string path() const;       // <save_dir>/<name>/version_<N>
  void create() const;            // mkdir -p path()

 private:
  static int64_t next_free_version(const std::string& save_dir, const std::string& name);

  std::string save_dir_, name_;
  int64_t version_;
};

// The keys every logger that writes into a LogDirectory declares (save_dir, name, version), for
// an options struct with those members; the logger's own keys are added to the result.
template <typename Options>
OptionSchema<Options> log_directory_schema(std::string owner) {
  return std::move(OptionSchema<Options>(std::move(owner))
                       .option("save_dir", &Options::save_dir, "root directory (default: --default-root-dir)")
                       .option("name", &Options::name, "experiment directory under save_dir")
                       .option("version", &Options::version, "version number; -1 picks the next free one",
                               at_least(-1)));
}

}  // namespace volt
