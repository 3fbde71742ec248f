#include "trainer/run_main.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <utility>

#include "distributed/process_launcher.h"
#include "core/error.h"
#include "trainer/trainer_options.h"

namespace volt {
namespace {

// "[rank 3] " in a process of a run of several, as the launchers number them (volt's and
// torchrun's RANK and WORLD_SIZE, SLURM's SLURM_PROCID and SLURM_NTASKS, Open MPI's
// OMPI_COMM_WORLD_RANK and OMPI_COMM_WORLD_SIZE); "" in a process alone.
std::string rank_prefix() {
  for (const auto& [rank, size] : {std::pair{"RANK", "WORLD_SIZE"}, {"SLURM_PROCID", "SLURM_NTASKS"},
                                   {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"}}) {
    const char* r = std::getenv(rank);
    const char* n = std::getenv(size);
    if (r != nullptr && n != nullptr && std::atoll(n) > 1) return std::string("[rank ") + r + "] ";
  }
  return "";
}

// One error line on stderr, in one write: the lines of ranks failing at once do not interleave.
void print_error(const std::string& text) {
  const std::string line = rank_prefix() + text + "\n";
  size_t done = 0;
  while (done < line.size()) {
    const ssize_t n = ::write(STDERR_FILENO, line.data() + done, line.size() - done);
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
}

int run_body(const std::function<void()>& body) {
  try {
    body();
    return 0;
  } catch (const HelpRequested& help) {
    std::cout << help.what();
    return 0;
  } catch (const ConfigurationError& e) {
    print_error(std::string("error: ") + e.what());
    return 2;
  } catch (const Error& e) {
    print_error(std::string("error: ") + e.what());
    return 1;
  } catch (const c10::Error& e) {
    print_error(std::string("error (LibTorch): ") + e.what_without_backtrace());
    return 1;
  } catch (const std::exception& e) {
    print_error(std::string("error: ") + e.what());
    return 1;
  }
}

// How long a failed parent waits for its children to end by themselves before stopping them.
constexpr std::chrono::seconds kChildrenGrace{3};

// With volt's launcher this process is local rank 0 of a group it started: it ends only after its
// children, and fails when one of them did (naming it).
int finish_children(int exit_code, ProcessLauncher& launcher) {
  if (!launcher.launched()) return exit_code;
  if (exit_code != 0) {
    // A child that failed too (often first) ends by itself within moments of this process's
    // failure, printing its own error line; stopping it at once could cut that line off. The
    // others stop when this process's connections close; what still runs after the grace is
    // stopped.
    const auto first = launcher.failure();  // a child that failed before this process did
    launcher.wait_for_children(kChildrenGrace);
    if (first) print_error("error: the first failure was " + *first);
    return exit_code;
  }
  if (auto failure = launcher.wait_for_children(launcher.finish_timeout())) {
    print_error("error: " + *failure);
    return 1;
  }
  return 0;
}

}  // namespace

int run_main(const std::function<void()>& body) { return run_body(body); }

int run_main(const std::function<void(ProcessLauncher& launcher)>& body) {
  ProcessLauncher launcher;
  return finish_children(run_body([&] { body(launcher); }), launcher);
}

}  // namespace volt
