#include "checkpoint/atomic_file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "core/error.h"

namespace fs = std::filesystem;

namespace volt {
namespace {

std::string system_error_text(int error) { return std::strerror(error); }

std::string temporary_prefix(const fs::path& path) {
  std::string prefix(1, '.');  // built by appending: GCC 12 warns falsely on "." + std::string
  prefix += path.filename().string();
  prefix += ".tmp-";
  return prefix;
}

// Removes temporary files of `path` whose writing process no longer exists (it was killed before
// its rename). A live process's temporary file is left alone: it may be writing right now.
void remove_stale_temporaries(const fs::path& path) {
  const std::string prefix = temporary_prefix(path);
  std::error_code error;
  for (fs::directory_iterator it(path.parent_path(), error), end; !error && it != end; it.increment(error)) {
    const std::string name = it->path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    const pid_t pid = static_cast<pid_t>(std::atoll(name.c_str() + prefix.size()));
    if (pid <= 0 || (::kill(pid, 0) != 0 && errno == ESRCH)) {
      std::error_code ignored;
      fs::remove(it->path(), ignored);
    }
  }
}

}  // namespace

void checkpoint_test_kill_point(const char* where) {
  const char* point = std::getenv("VOLT_CHECKPOINT_TEST_KILL");
  if (point == nullptr || *point == '\0') return;
  const std::string value = point;
  // The point the variable names (one of the known ones) and the call it counts to.
  std::string named;
  int64_t nth = 1;
  bool valid = false;
  for (const std::string known : {"before_rename", "during_removal"}) {
    if (value.rfind(known, 0) != 0) continue;
    named = known;
    valid = value.size() == known.size();
    if (!valid && value[known.size()] == ':' && value.size() > known.size() + 1 &&
        value.find_first_not_of("0123456789", known.size() + 1) == std::string::npos) {
      nth = std::stoll(value.substr(known.size() + 1));
      valid = true;
    }
  }
  check<ConfigurationError>(valid && nth >= 1,
                            "VOLT_CHECKPOINT_TEST_KILL: expected 'before_rename', 'during_removal', either with "
                            "':N' (N >= 1), or unset, got '", value, "'; this variable is for volt's tests only");
  if (named != where) return;
  static std::atomic<int64_t> reached{0};  // the named point's calls in this process, from any thread
  if (++reached == nth) ::raise(SIGKILL);
}

AtomicFileWriter::AtomicFileWriter(fs::path path) : path_(std::move(path)) {
  check<CheckpointError>(!path_.filename().empty(), "checkpoint: expected a file path, got '", path_.string(),
                         "' (it names a directory)");
  if (path_.parent_path().empty()) path_ = fs::path(".") / path_;
  std::error_code error;
  fs::create_directories(path_.parent_path(), error);
  check<CheckpointError>(!error, "checkpoint: cannot create directory '", path_.parent_path().string(),
                         "': ", error.message(), "; check the path and its permissions");
  remove_stale_temporaries(path_);
  static std::atomic<uint64_t> counter{0};
  temporary_ = path_.parent_path() /
               (temporary_prefix(path_) + std::to_string(::getpid()) + "-" + std::to_string(counter++));
  fd_ = ::open(temporary_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  check<CheckpointError>(fd_ >= 0, "checkpoint: cannot create '", temporary_.string(), "': ",
                         system_error_text(errno), "; check the directory's permissions and free space");
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(temporary_.c_str());
}

void AtomicFileWriter::fail(const std::string& what) {
  if (error_.empty()) error_ = what + ": " + system_error_text(errno);
}

size_t AtomicFileWriter::write(const void* data, size_t size) {
  if (!error_.empty()) return 0;
  const char* bytes = static_cast<const char*>(data);
  size_t left = size;
  while (left > 0) {
    const ssize_t n = ::write(fd_, bytes, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = EIO;
      fail("write");
      return 0;
    }
    bytes += n;
    left -= static_cast<size_t>(n);
  }
  written_ += size;
  return size;
}

void AtomicFileWriter::commit() {
  VOLT_INTERNAL_ASSERT(!committed_, "AtomicFileWriter::commit called twice");
  if (error_.empty() && ::fsync(fd_) != 0) fail("fsync");
  if (::close(fd_) != 0) fail("close");
  fd_ = -1;
  check<CheckpointError>(error_.empty(), "checkpoint: writing '", path_.string(), "' failed (", error_,
                         "); the previous file at that path, if any, is unchanged. Check free space and "
                         "permissions");
  checkpoint_test_kill_point("before_rename");
  if (::rename(temporary_.c_str(), path_.c_str()) != 0) {
    fail("rename");
    throw CheckpointError("checkpoint: cannot rename '" + temporary_.string() + "' to '" + path_.string() +
                          "' (" + error_ + "); the previous file at that path, if any, is unchanged");
  }
  committed_ = true;
  sync_directory(path_.parent_path());
}

void sync_directory(const fs::path& directory) {
  const int fd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  check<CheckpointError>(fd >= 0, "checkpoint: cannot open directory '", directory.string(), "' to sync it: ",
                         system_error_text(errno));
  const int result = ::fsync(fd);
  const int error = errno;
  ::close(fd);
  check<CheckpointError>(result == 0, "checkpoint: fsync of directory '", directory.string(), "' failed: ",
                         system_error_text(error));
}

}  // namespace volt
