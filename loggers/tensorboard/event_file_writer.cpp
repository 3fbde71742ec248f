#include "loggers/tensorboard/event_file_writer.h"

#include <unistd.h>

#include <atomic>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "loggers/tensorboard/summary_proto.h"
#include "core/error.h"
#include "core/crc32c.h"

namespace volt::tensorboard {
namespace {

template <typename T>
void append_little_endian(std::string& out, T value) {
  unsigned char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  if constexpr (std::endian::native == std::endian::big) {
    for (size_t i = 0; i < sizeof(T) / 2; ++i) std::swap(bytes[i], bytes[sizeof(T) - 1 - i]);
  }
  out.append(reinterpret_cast<const char*>(bytes), sizeof(T));
}

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

// Distinguishes two writers created by one process in the same second.
std::atomic<int64_t> writers_created{0};

}  // namespace

std::string frame_record(std::string_view data) {
  std::string length;
  append_little_endian<uint64_t>(length, data.size());
  std::string record = length;
  append_little_endian<uint32_t>(record, masked_crc32c(crc32c(length.data(), length.size())));
  record.append(data.data(), data.size());
  append_little_endian<uint32_t>(record, masked_crc32c(crc32c(data.data(), data.size())));
  return record;
}

double wall_time_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

EventFileWriter::EventFileWriter(const std::string& directory) {
  std::error_code error;
  std::filesystem::create_directories(directory, error);
  check<ConfigurationError>(!error, "TensorBoardLogger: cannot create '", directory, "': ", error.message(),
                            "; check the logger's save_dir (default --default-root-dir)");
  const double now = wall_time_now();
  char seconds[32];
  std::snprintf(seconds, sizeof(seconds), "%010lld", static_cast<long long>(now));
  path_ = (std::filesystem::path(directory) / ("events.out.tfevents." + std::string(seconds) + "." + host_name() +
                                               "." + std::to_string(getpid()) + "." +
                                               std::to_string(writers_created++)))
              .string();
  out_.open(path_, std::ios::binary | std::ios::app);
  check_stream("create");
  write(file_version_event(now));
  flush();
}

void EventFileWriter::write(std::string_view event) {
  const std::string record = frame_record(event);
  out_.write(record.data(), static_cast<std::streamsize>(record.size()));
  check_stream("write to");
}

void EventFileWriter::flush() {
  out_.flush();
  check_stream("flush");
}

void EventFileWriter::check_stream(const char* action) const {
  check<ConfigurationError>(out_.good(), "TensorBoardLogger: cannot ", action, " '", path_, "': ",
                            std::strerror(errno), "; check free space and permissions");
}

}  // namespace volt::tensorboard
