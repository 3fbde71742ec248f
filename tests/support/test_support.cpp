#include "tests/support/test_support.h"

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <gtest/gtest.h>
#include <torch/version.h>

#include "core/error.h"

namespace volt::testing {

TemporaryDirectory::TemporaryDirectory() {
  std::string pattern = (std::filesystem::temp_directory_path() / "volt_test_XXXXXX").string();
  if (mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed for " + pattern);
  path_ = pattern;
}

TemporaryDirectory::~TemporaryDirectory() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

ProcessResult run_command(const std::string& command, int timeout_seconds) {
  // timeout(1) bounds the run; --kill-after makes sure nothing outlives the test.
  const std::string wrapped = "timeout --kill-after=10 " + std::to_string(timeout_seconds) + " sh -c '" +
                              [&] {
                                std::string escaped;
                                for (char c : command) escaped += c == '\'' ? std::string("'\\''") : std::string(1, c);
                                return escaped;
                              }() + "' 2>&1";
  ProcessResult result;
  FILE* pipe = popen(wrapped.c_str(), "r");
  if (!pipe) throw std::runtime_error("popen failed for " + command);
  std::array<char, 4096> buffer{};
  size_t n = 0;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0) result.output.append(buffer.data(), n);
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

std::string file_text(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::vector<std::map<std::string, std::string>> read_csv(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  auto split = [](const std::string& line) {
    std::vector<std::string> cells;
    std::stringstream stream(line);
    std::string cell;
    while (std::getline(stream, cell, ',')) cells.push_back(cell);
    if (!line.empty() && line.back() == ',') cells.emplace_back();
    return cells;
  };
  std::string line;
  std::getline(in, line);
  const auto header = split(line);
  std::vector<std::map<std::string, std::string>> rows;
  while (std::getline(in, line)) {
    const auto cells = split(line);
    std::map<std::string, std::string> row;
    for (size_t i = 0; i < header.size() && i < cells.size(); ++i) {
      if (!cells[i].empty()) row[header[i]] = cells[i];
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

std::string built_binary(const std::string& relative) { return std::string(VOLT_BUILD_DIR) + "/" + relative; }

std::string reference_python() {
  if (const char* chosen = std::getenv("VOLT_REFERENCE_PYTHON"); chosen && *chosen) return chosen;
  const std::string site = VOLT_REFERENCE_PYTHONPATH;
  return site.empty() ? "/usr/bin/python3" : "env PYTHONPATH=" + site + " /usr/bin/python3";
}

std::string fairscale_path() { return VOLT_FAIRSCALE_PATH; }

std::string fairscale_python() {
  const std::string site = VOLT_REFERENCE_PYTHONPATH;
  return "env PYTHONPATH=" + fairscale_path() + (site.empty() ? "" : ":" + site) + " /usr/bin/python3";
}

std::string torchrun() { return reference_python() + " -m torch.distributed.run"; }

std::string reference_torch_version() {
  return std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR);
}

std::string configuration_error_of(const std::function<void()>& body) {
  return error_message_of<ConfigurationError>(body);
}

}  // namespace volt::testing
