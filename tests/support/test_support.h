#pragma once
// Helpers every test area shares.
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace volt::testing {

// A fresh directory under /tmp, removed (with its contents) when the object is destroyed.
class TemporaryDirectory {
 public:
  TemporaryDirectory();
  ~TemporaryDirectory();
  TemporaryDirectory(const TemporaryDirectory&) = delete;
  TemporaryDirectory& operator=(const TemporaryDirectory&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

struct ProcessResult {
  int exit_code = -1;  // the exit status, or 128 + signal number
  std::string output;  // stdout and stderr interleaved
};

// Runs `command` through /bin/sh, capturing its output; gives up (killing it) after
// `timeout_seconds` and reports exit code 124 then.
ProcessResult run_command(const std::string& command, int timeout_seconds = 300);

// The whole text of a file ("" when it cannot be read).
std::string file_text(const std::string& path);

// A CSV file as rows of column → text (empty cells are absent).
std::vector<std::map<std::string, std::string>> read_csv(const std::string& path);

// Path of a binary built by this project (e.g. "examples/fashion_mnist").
std::string built_binary(const std::string& relative);

// The Python that the parity tests run PyTorch's own implementation in, as a shell command
// (prefix a script and its arguments): the PyTorch of the LibTorch this build links, so that
// each build is compared with its own version. Debian's python3-torch (1.13) for a build against
// Debian's LibTorch; for a build against a PyTorch wheel's LibTorch (tools/setup_pytorch2.sh),
// /usr/bin/python3 with that wheel's folder first on PYTHONPATH. VOLT_REFERENCE_PYTHON in the
// environment overrides it (e.g. the GPU machine's own python3).
std::string reference_python();
// The project-local fairscale (tools/setup_fairscale.sh installs it into .deps/fairscale), and the
// reference Python with it first on PYTHONPATH, beside the reference PyTorch.
std::string fairscale_path();
std::string fairscale_python();
// "1.13" or "2.11": the major.minor version of the reference PyTorch (= this build's LibTorch).
std::string reference_torch_version();
// torchrun of the reference PyTorch, as a shell command: the one that goes with this build's
// LibTorch, whose c10d talks to torchrun's agent store (a LibTorch 2.x client is reset by 1.13's
// TCPStore server).
std::string torchrun();

// The message of the ErrorType that `body` throws; a test failure (and "") when it throws none
// (another exception type propagates).
template <typename ErrorType>
std::string error_message_of(const std::function<void()>& body) {
  try {
    body();
  } catch (const ErrorType& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an exception of the type asked for; none was thrown";
  return "";
}

// error_message_of<ConfigurationError>.
std::string configuration_error_of(const std::function<void()>& body);

}  // namespace volt::testing
