#include "data/memory_mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace volt {

MemoryMappedFile::MemoryMappedFile(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  check<DataError>(fd >= 0, "MemoryMappedFile: cannot open ", path, ": ", std::strerror(errno));
  struct stat info {};
  if (::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    ::close(fd);
    throw DataError("MemoryMappedFile: " + path + " is not a regular file");
  }
  size_ = static_cast<size_t>(info.st_size);
  if (size_ > 0) {
    void* mapped = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd, 0);
    const int error = errno;
    ::close(fd);
    check<DataError>(mapped != MAP_FAILED, "MemoryMappedFile: cannot map ", path, " (", size_, " bytes): ",
                     std::strerror(error));
    data_ = static_cast<const uint8_t*>(mapped);
  } else {
    ::close(fd);
  }
}

MemoryMappedFile::~MemoryMappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
}

}  // namespace volt
