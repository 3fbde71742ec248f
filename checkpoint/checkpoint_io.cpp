#include "checkpoint/checkpoint_io.h"

#include <caffe2/serialize/read_adapter_interface.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <typeinfo>

#include "checkpoint/atomic_file.h"
#include "checkpoint/checkpoint_format.h"
#include "core/error.h"

namespace fs = std::filesystem;

namespace volt {
namespace {

// Random access to a file for LibTorch's zip reader. Reads past the end return fewer bytes (the
// reader reports them as a damaged archive) rather than failing in the adapter.
class FileReadAdapter : public caffe2::serialize::ReadAdapterInterface {
 public:
  explicit FileReadAdapter(const fs::path& path) : path_(path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    check<CheckpointError>(fd_ >= 0, "checkpoint: cannot open '", path.string(), "': ", std::strerror(errno));
    const off_t end = ::lseek(fd_, 0, SEEK_END);
    size_ = end < 0 ? 0 : static_cast<size_t>(end);
  }
  ~FileReadAdapter() override { ::close(fd_); }
  size_t size() const override { return size_; }
  size_t read(uint64_t pos, void* buf, size_t n, const char* what) const override {
    size_t done = 0;
    while (done < n) {
      const ssize_t got = ::pread(fd_, static_cast<char*>(buf) + done, n - done, static_cast<off_t>(pos + done));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) break;
      done += static_cast<size_t>(got);
    }
    return done;
  }

 private:
  fs::path path_;
  int fd_ = -1;
  size_t size_ = 0;
};

// The file `path` for the zip reader; throws CheckpointError when it is missing or a directory.
std::shared_ptr<FileReadAdapter> open_checkpoint_file(const fs::path& path) {
  std::error_code error;
  const auto status = fs::status(path, error);
  check<CheckpointError>(fs::exists(status), "checkpoint: no file at '", path.string(),
                         "'; check the path (or pass 'last' to resume from the newest checkpoint)");
  check<CheckpointError>(!fs::is_directory(status), "checkpoint: '", path.string(),
                         "' is a directory; expected a checkpoint file");
  return std::make_shared<FileReadAdapter>(path);
}

}  // namespace

StateDict read_checkpoint_file(const fs::path& path, bool require_integrity) {
  return read_checkpoint_archive(open_checkpoint_file(path), "checkpoint '" + path.string() + "'", require_integrity);
}

LazyCheckpoint CheckpointIO::load_lazily(const fs::path& path, const std::vector<std::string>& lazy_sections) {
  // A subclass's load() may read from elsewhere than `path` on the local disk: go through it.
  if (typeid(*this) != typeid(CheckpointIO)) return {load(path), nullptr, {}};
  return read_checkpoint_archive_lazily(open_checkpoint_file(path), "checkpoint '" + path.string() + "'",
                                        lazy_sections);
}

void CheckpointIO::save(const StateDict& checkpoint, const fs::path& path) {
  AtomicFileWriter file(path);
  try {
    write_checkpoint_archive(checkpoint, [&](const void* data, size_t size) { return file.write(data, size); });
  } catch (const CheckpointError&) {
    if (file.failed()) file.commit();  // throws with the system's reason, e.g. "No space left on device"
    throw;  // the temporary file is removed; `path` is untouched
  }
  file.commit();
}

StateDict CheckpointIO::load(const fs::path& path) { return read_checkpoint_file(path); }

// Note [Removing a checkpoint]: a sharded checkpoint is a directory of files, and removing them
// one by one under the checkpoint's name would leave, when the process is killed half-way, a
// directory that looks like the newest checkpoint and is not one (ckpt_path "last" would pick
// it, and fail, at every restart). So a checkpoint is first renamed to a hidden name in its
// directory (one atomic step, made durable), and only then are its files removed. A kill at any
// moment leaves either the whole checkpoint under its name or a hidden entry, which readers
// ignore (find_last_checkpoint skips names that start with "."), and which the next removal in
// that directory removes.
void CheckpointIO::remove(const fs::path& path) {
  std::error_code error;
  if (!fs::exists(fs::symlink_status(path, error))) return;
  const fs::path directory = path.has_parent_path() ? path.parent_path() : fs::path(".");
  const std::string suffix = ".removing";
  // What killed removals left in this directory.
  for (fs::directory_iterator it(directory, error), end; !error && it != end; it.increment(error)) {
    const std::string name = it->path().filename().string();
    if (name.size() > suffix.size() + 1 && name[0] == '.' &&
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
      std::error_code ignored;
      fs::remove_all(it->path(), ignored);
    }
  }
  std::string hidden(1, '.');  // built by appending: GCC 12 warns falsely on "." + std::string
  hidden += path.filename().string();
  hidden += suffix;
  const fs::path out_of_the_way = directory / hidden;
  fs::rename(path, out_of_the_way, error);
  check<CheckpointError>(!error, "checkpoint: cannot move '", path.string(), "' out of the way to remove it: ",
                         error.message());
  sync_directory(directory);
  checkpoint_test_kill_point("during_removal");
  fs::remove_all(out_of_the_way, error);
  check<CheckpointError>(!error, "checkpoint: cannot remove '", out_of_the_way.string(), "' (was '", path.string(),
                         "'): ", error.message());
  sync_directory(directory);
}

}  // namespace volt
