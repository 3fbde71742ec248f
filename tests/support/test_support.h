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

// A CSV file as rows of column → text (empty cells are absent).
std::vector<std::map<std::string, std::string>> read_csv(const std::string& path);

// Path of a binary built by this project (e.g. "examples/fashion_mnist").
std::string built_binary(const std::string& relative);

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
