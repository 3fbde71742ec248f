#include "distributed/transports/shared_segment.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <random>
#include <sstream>

namespace volt {

namespace {

constexpr uint64_t kMagic = 0x766f6c7473686d32ull;  // "voltshm2"
constexpr const char* kNamePrefix = "volt-shm-";

// The segment's own first bytes: whose it is.
struct Stamp {
  uint64_t magic;
  uint64_t nonce;
  uint64_t bytes;
};
static_assert(sizeof(Stamp) <= kSegmentStampBytes);

// Removes segments this host's earlier groups left behind: a creator killed between creating its
// segment and removing its name (the name holds the creator's pid). Best effort.
void remove_stale_segments() {
  DIR* directory = ::opendir("/dev/shm");
  if (directory == nullptr) return;
  while (const dirent* entry = ::readdir(directory)) {
    const std::string name = entry->d_name;
    if (name.rfind(kNamePrefix, 0) != 0) continue;
    const auto dash = name.find('-', std::strlen(kNamePrefix));
    if (dash == std::string::npos) continue;
    const pid_t pid = static_cast<pid_t>(std::strtol(name.c_str() + std::strlen(kNamePrefix), nullptr, 10));
    if (pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH) ::shm_unlink(("/" + name).c_str());
  }
  ::closedir(directory);
}

// Maps `bytes` of the segment open as `fd` (closing it); null with `problem` set when it fails.
void* map_segment(int fd, size_t bytes, std::string& problem) {
  void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (base != MAP_FAILED) return base;
  problem = std::string("mmap: ") + std::strerror(errno);
  return nullptr;
}

// Rank 0's part: a new segment, named by this process and a nonce, reserved and stamped. Its
// name, or null with `problem` set.
void* create_segment(size_t bytes, std::string& name, std::string& problem) {
  remove_stale_segments();
  std::random_device random;
  const uint64_t nonce = (static_cast<uint64_t>(random()) << 32) ^ random();
  std::ostringstream text;
  text << "/" << kNamePrefix << ::getpid() << "-" << std::hex << nonce;
  name = text.str();
  const int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) {
    problem = std::string("shm_open: ") + std::strerror(errno);
    return nullptr;
  }
  // Reserved now, not as pages are first touched: a /dev/shm too small for the segment (a
  // container's 64 MB) then refuses it here, and the group stays on Gloo, where a sparse
  // segment would kill a rank with SIGBUS in its first large collective.
  void* base = nullptr;
  int reserved = 0;
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    problem = std::string("ftruncate: ") + std::strerror(errno);
    ::close(fd);
  } else if ((reserved = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes))) != 0) {
    problem = std::string("reserving it in /dev/shm (posix_fallocate): ") + std::strerror(reserved);
    ::close(fd);
  } else {
    base = map_segment(fd, bytes, problem);
  }
  if (base == nullptr) {
    ::shm_unlink(name.c_str());
    return nullptr;
  }
  new (base) Stamp{kMagic, nonce, bytes};
  return base;
}

// The others' part: `name` mapped, if it is the segment rank 0 stamped for this group.
void* open_segment(const std::string& name, size_t bytes, std::string& problem) {
  const int fd = ::shm_open(name.c_str(), O_RDWR, 0600);
  if (fd < 0) {
    problem = "shm_open '" + name + "': " + std::strerror(errno);
    return nullptr;
  }
  struct stat status {};
  if (::fstat(fd, &status) != 0 || static_cast<size_t>(status.st_size) != bytes) {
    problem = "the segment '" + name + "' has another size than this group's";
    ::close(fd);
    return nullptr;
  }
  void* base = map_segment(fd, bytes, problem);
  if (base == nullptr) return nullptr;
  const auto* stamp = static_cast<const Stamp*>(base);
  const uint64_t nonce = std::stoull(name.substr(name.rfind('-') + 1), nullptr, 16);
  if (stamp->magic != kMagic || stamp->nonce != nonce || stamp->bytes != bytes) {
    problem = "the segment '" + name + "' belongs to another group";
    ::munmap(base, bytes);
    return nullptr;
  }
  return base;
}

}  // namespace

SharedSegment::~SharedSegment() { ::munmap(base_, bytes_); }

// Rank 0's segment until the join is over: an exchange that throws (a peer gone during the join)
// must not leave the name in /dev/shm, with its pages reserved, nor the mapping in this process.
struct CreatedSegment {
  std::string name;
  void* base = nullptr;
  size_t bytes = 0;
  bool linked = false, mapped = false;
  ~CreatedSegment() {
    if (linked) ::shm_unlink(name.c_str());
    if (mapped) ::munmap(base, bytes);
  }
};

std::unique_ptr<SharedSegment> share_segment(const BytesExchange& exchange, int64_t rank, size_t bytes,
                                             const std::function<void(char*)>& initialize,
                                             const std::function<bool(const char*)>& belongs, std::string& why_not) {
  std::string name, problem;
  void* base = nullptr;
  CreatedSegment created;
  if (rank == 0) {
    base = create_segment(bytes, name, problem);
    if (base != nullptr) {
      created.name = name;
      created.base = base;
      created.bytes = bytes;
      created.linked = created.mapped = true;
      initialize(static_cast<char*>(base) + kSegmentStampBytes);
    }
  }
  const std::string segment = exchange(rank == 0 ? (base ? name : "!" + problem) : std::string()).at(0);
  if (segment.empty() || segment[0] == '!') {
    why_not = "rank 0 could not create a shared-memory segment of " + std::to_string(bytes) + " bytes (" +
              (segment.empty() ? std::string("?") : segment.substr(1)) + ")";
    return nullptr;
  }
  if (rank != 0) {
    base = open_segment(segment, bytes, problem);
    if (base != nullptr && !belongs(static_cast<const char*>(base) + kSegmentStampBytes)) {
      problem = "the segment '" + segment + "' belongs to another group";
      ::munmap(base, bytes);
      base = nullptr;
    }
  }
  // Every rank knows whether every rank mapped it; then the name goes.
  const auto mapped = exchange(base != nullptr ? std::string() : problem.empty() ? "?" : problem);
  if (rank == 0) {
    ::shm_unlink(segment.c_str());
    created.linked = created.mapped = false;  // the name is gone; the mapping is the group's now
  }
  auto mapping = base != nullptr ? std::make_unique<SharedSegment>(base, bytes) : nullptr;
  for (size_t r = 0; r < mapped.size(); ++r) {
    if (!mapped[r].empty()) {
      why_not = "rank " + std::to_string(r) + " could not map the shared-memory segment: " + mapped[r];
      return nullptr;
    }
  }
  return mapping;
}

}  // namespace volt
