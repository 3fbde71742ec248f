#pragma once
// An append-only TensorBoard event file: events.out.tfevents.<unix seconds>.<host>.<pid>.<n> in a
// directory, holding TFRecord-framed serialized tensorboard.Event messages, the first of which
// names the file format. Owned by one logger on one thread; not thread-safe.
#include <cstdint>
#include <fstream>
#include <string>
#include <string_view>

namespace volt::tensorboard {

// One TFRecord: uint64 length, masked CRC32C of those 8 bytes, the data, masked CRC32C of the
// data (all little-endian). A reader that meets a truncated last record ignores it, so a crash
// mid-write loses at most that record.
std::string frame_record(std::string_view data);

class EventFileWriter {
 public:
  // Creates `directory` if needed and the file, and writes the file-version event. Throws
  // ConfigurationError naming the path when it cannot.
  explicit EventFileWriter(const std::string& directory);
  // Appends one serialized Event.
  void write(std::string_view event);
  // Hands what was written to the operating system (a reader sees it after this).
  void flush();
  const std::string& path() const { return path_; }

 private:
  void check_stream(const char* action) const;

  std::string path_;
  std::ofstream out_;
};

// Seconds since the Unix epoch, with sub-second precision (Event.wall_time).
double wall_time_now();

}  // namespace volt::tensorboard
