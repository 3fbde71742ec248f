#pragma once
// Ranks of a benchmark as processes: every command starts at once, the first one's stdout is
// captured, and all are waited for, under a time limit. run_processes (bench_support.h) is this
// with one environment for all and an error on failure; comm_hooks retries failed pairs itself.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

namespace volt::bench {

struct RanksResult {
  std::string output;        // the first process's stdout
  bool timed_out = false;    // the limit passed; all were killed
  std::vector<int> status;   // waitpid statuses (meaningless when timed_out)
  bool ok() const {
    if (timed_out) return false;
    for (const int s : status) {
      if (!WIFEXITED(s) || WEXITSTATUS(s) != 0) return false;
    }
    return true;
  }
  // "rank 0: exit 0, rank 1: signal 6", or "timed out".
  std::string describe() const {
    if (timed_out) return "timed out";
    std::string text;
    for (size_t r = 0; r < status.size(); ++r) {
      const int s = status[r];
      text += (r ? ", rank " : "rank ") + std::to_string(r) + ": " +
              (WIFEXITED(s) ? "exit " + std::to_string(WEXITSTATUS(s))
                            : "signal " + std::to_string(WIFSIGNALED(s) ? WTERMSIG(s) : -1));
    }
    return text;
  }
};

// Runs each of `argvs` (argv[0] found on PATH) with the matching entry of `envs` added to its
// environment (`envs` may be shorter: the missing ones add nothing), and kills all when they take
// longer than `timeout`.
inline RanksResult run_ranks(const std::vector<std::vector<std::string>>& argvs,
                             const std::vector<std::map<std::string, std::string>>& envs,
                             std::chrono::seconds timeout) {
  int fds[2];
  if (pipe(fds) != 0) std::abort();
  std::vector<pid_t> pids(argvs.size());
  for (size_t rank = 0; rank < argvs.size(); ++rank) {
    pids[rank] = fork();
    if (pids[rank] < 0) std::abort();
    if (pids[rank] == 0) {
      if (rank == 0) dup2(fds[1], STDOUT_FILENO);
      close(fds[0]);
      close(fds[1]);
      if (rank < envs.size()) {
        for (const auto& [key, value] : envs[rank]) setenv(key.c_str(), value.c_str(), 1);
      }
      std::vector<std::string> args = argvs[rank];
      std::vector<char*> raw;
      for (auto& a : args) raw.push_back(a.data());
      raw.push_back(nullptr);
      execvp(raw[0], raw.data());
      _exit(127);
    }
  }
  close(fds[1]);
  RanksResult result;
  result.status.assign(argvs.size(), 0);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  char buffer[4096];
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      result.timed_out = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 1000))) <= 0) continue;
    const ssize_t n = read(fds[0], buffer, sizeof buffer);
    if (n <= 0) break;  // the first process closed its stdout (it ended)
    result.output.append(buffer, static_cast<size_t>(n));
  }
  // The first is done (or the time is up); the others get what is left of the limit.
  for (size_t rank = 0; rank < pids.size(); ++rank) {
    for (;;) {
      if (waitpid(pids[rank], &result.status[rank], WNOHANG) == pids[rank]) break;
      if (result.timed_out || std::chrono::steady_clock::now() > deadline) {
        result.timed_out = true;
        kill(pids[rank], SIGKILL);
        waitpid(pids[rank], &result.status[rank], 0);
        break;
      }
      usleep(20'000);
    }
  }
  close(fds[0]);
  return result;
}

}  // namespace volt::bench
