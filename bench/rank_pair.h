#pragma once
// Two ranks of a benchmark as processes: both commands start at once, rank 0's stdout is
// captured, and both are waited for, under a time limit. Shared by the benchmarks that put volt's
// workers beside PyTorch's (ddp_vs_torch, comm_hooks).
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

namespace volt::bench {

struct RankPairResult {
  std::string output;          // rank 0's stdout
  bool timed_out = false;      // the limit passed; both were killed
  std::array<int, 2> status{}; // waitpid statuses (meaningless when timed_out)
  bool ok() const {
    return !timed_out && WIFEXITED(status[0]) && WEXITSTATUS(status[0]) == 0 && WIFEXITED(status[1]) &&
           WEXITSTATUS(status[1]) == 0;
  }
  // "exit 1 / killed by signal 6" for both ranks, or "timed out".
  std::string describe() const {
    if (timed_out) return "timed out";
    std::string text;
    for (int r = 0; r < 2; ++r) {
      text += (r ? ", rank 1: " : "rank 0: ") +
              (WIFEXITED(status[r]) ? "exit " + std::to_string(WEXITSTATUS(status[r]))
                                    : "signal " + std::to_string(WIFSIGNALED(status[r]) ? WTERMSIG(status[r]) : -1));
    }
    return text;
  }
};

// Runs argv[0] and argv[1] (ranks 0 and 1) with `env` added to each one's environment, and kills
// both when they take longer than `timeout`.
inline RankPairResult run_rank_pair(const std::array<std::vector<std::string>, 2>& argv,
                                    const std::array<std::map<std::string, std::string>, 2>& env,
                                    std::chrono::seconds timeout) {
  int fds[2];
  if (pipe(fds) != 0) std::abort();
  std::array<pid_t, 2> pids{};
  for (int rank = 0; rank < 2; ++rank) {
    pids[rank] = fork();
    if (pids[rank] < 0) std::abort();
    if (pids[rank] == 0) {
      if (rank == 0) dup2(fds[1], STDOUT_FILENO);
      close(fds[0]);
      close(fds[1]);
      for (const auto& [key, value] : env[rank]) setenv(key.c_str(), value.c_str(), 1);
      std::vector<std::string> args = argv[rank];
      std::vector<char*> raw;
      for (auto& a : args) raw.push_back(a.data());
      raw.push_back(nullptr);
      execvp(raw[0], raw.data());
      _exit(127);
    }
  }
  close(fds[1]);
  RankPairResult result;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  char buffer[4096];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      result.timed_out = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 1000))) <= 0) continue;
    const ssize_t n = read(fds[0], buffer, sizeof buffer);
    if (n <= 0) break;  // rank 0 closed its stdout (it ended)
    result.output.append(buffer, static_cast<size_t>(n));
  }
  // Rank 0 is done (or the time is up); rank 1 gets what is left of the limit.
  for (int rank = 0; rank < 2; ++rank) {
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
