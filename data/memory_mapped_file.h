#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace volt {

// A whole file mapped read-only into memory (mmap, MAP_SHARED): its pages are read from the page
// cache when first touched and shared by every process that maps it. The mapping lives as long as
// the object. Thread-safe to read. A missing or unreadable file is a DataError naming it.
class MemoryMappedFile {
 public:
  explicit MemoryMappedFile(const std::string& path);
  ~MemoryMappedFile();
  MemoryMappedFile(const MemoryMappedFile&) = delete;
  MemoryMappedFile& operator=(const MemoryMappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace volt
