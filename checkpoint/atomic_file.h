#pragma once
#include <cstddef>
#include <filesystem>
#include <string>

namespace volt {

// Writes one file so that a reader of `path` sees either its previous content or the complete
// new content, never a part of it, even if the process dies or the machine loses power midway:
// bytes go to a hidden temporary file beside `path` (same directory, so same file system), which
// commit() fsyncs and renames over `path`, then fsyncs the directory so the rename is durable.
// Until commit() the final name is untouched; a writer destroyed without commit() removes its
// temporary file. Temporary files that a killed process left behind (".<name>.tmp-<pid>-<n>") are
// removed by the next writer of the same name.
//
// Test-only pause point: with VOLT_CHECKPOINT_TEST_KILL=before_rename in the environment, commit()
// kills the process (SIGKILL) after the temporary file is complete and synced, before the rename;
// with before_rename:N, at the N-th such point the process reaches.
// Not thread-safe; one writer per file at a time.
class AtomicFileWriter {
 public:
  // Creates the parent directories and the temporary file; throws CheckpointError on failure.
  explicit AtomicFileWriter(std::filesystem::path path);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  // Appends `size` bytes. Returns `size`, or 0 once a write has failed (commit() then throws
  // with the reason); the signature fits PyTorchStreamWriter's writer function.
  size_t write(const void* data, size_t size);
  // Bytes written so far.
  size_t size() const { return written_; }
  // Whether a write failed (commit() would throw with the reason).
  bool failed() const { return !error_.empty(); }
  // fsync, rename over the final path, fsync the directory. Throws CheckpointError (with the
  // system's reason) when any write or step failed; the final path is then unchanged.
  void commit();

  const std::filesystem::path& path() const { return path_; }

 private:
  void fail(const std::string& what);

  std::filesystem::path path_;
  std::filesystem::path temporary_;
  int fd_ = -1;
  size_t written_ = 0;
  std::string error_;  // first failure, with errno's text
  bool committed_ = false;
};

// The test-only kill points: kills this process (SIGKILL) when VOLT_CHECKPOINT_TEST_KILL names
// `where`, alone or as "<where>:N" and this is the N-th call for it; does nothing when it is unset
// or names the other point. "before_rename": a complete temporary file or directory is about to
// be renamed into place; "during_removal": a checkpoint being removed has been renamed out of the
// way and its files are about to be removed (Note [Removing a checkpoint]).
void checkpoint_test_kill_point(const char* where);

// fsyncs a directory so that entries created, renamed or removed in it survive a power loss.
// Throws CheckpointError naming the directory on failure.
void sync_directory(const std::filesystem::path& directory);

}  // namespace volt
