// volt-lighthouse: where the replica groups of a fault-tolerant run meet (Note [Fault-tolerant
// replicas] in distributed/fault_tolerance/quorum.h, docs/fault_tolerance.md). Start it once,
// before the replicas, on a host they all reach, and leave it running; it outlives any replica.
//   volt-lighthouse --replicas R [--port P] [--min-replicas M] [--join-timeout S]
//                   [--heartbeat-timeout S] [--status-every S]
// Prints "LIGHTHOUSE port=P" once it listens, then, every --status-every seconds (0: never), what
// it waits for. Runs until SIGINT or SIGTERM; exit status 2 for a bad command line, 1 when the
// port cannot be bound.
#include <signal.h>

#include <atomic>
#include <chrono>
#include <iostream>
#include <string>
#include <thread>

#include "core/error.h"
#include "distributed/fault_tolerance/lighthouse.h"

namespace {

std::atomic<bool> stop_requested{false};

void request_stop(int) { stop_requested.store(true); }

const char* kUsage =
    "usage: volt-lighthouse --replicas R [--port P (29510; 0: any free port)] [--min-replicas M (1)]\n"
    "                       [--join-timeout SECONDS (30)] [--heartbeat-timeout SECONDS (2)]\n"
    "                       [--status-every SECONDS (0: never)]\n";

std::chrono::milliseconds seconds_of(const std::string& text) {
  return std::chrono::milliseconds(static_cast<int64_t>(std::stod(text) * 1000.0));
}

}  // namespace

int main(int argc, char** argv) {
  volt::LighthouseOptions options;
  double status_every = 0;
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string flag = argv[i];
      if (flag == "--help") {
        std::cout << kUsage;
        return 0;
      }
      volt::check<volt::ConfigurationError>(i + 1 < argc, "volt-lighthouse: ", flag, " needs a value");
      const std::string value = argv[++i];
      if (flag == "--replicas") {
        options.replicas = std::stoll(value);
      } else if (flag == "--port") {
        options.port = std::stoll(value);
      } else if (flag == "--min-replicas") {
        options.min_replicas = std::stoll(value);
      } else if (flag == "--join-timeout") {
        options.join_timeout = seconds_of(value);
      } else if (flag == "--heartbeat-timeout") {
        options.heartbeat_timeout = seconds_of(value);
      } else if (flag == "--status-every") {
        status_every = std::stod(value);
      } else {
        throw volt::ConfigurationError("volt-lighthouse: unknown flag '" + flag + "'");
      }
    }
    options.validate();
  } catch (const std::exception& e) {
    std::cerr << e.what() << "\n" << kUsage;
    return 2;
  }
  signal(SIGINT, request_stop);
  signal(SIGTERM, request_stop);
  try {
    volt::Lighthouse lighthouse(options);
    std::cout << "LIGHTHOUSE port=" << lighthouse.port() << std::endl;
    auto next_status = std::chrono::steady_clock::now();
    while (!stop_requested.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      if (status_every > 0 && std::chrono::steady_clock::now() >= next_status) {
        std::cout << "STATUS quorums=" << lighthouse.quorums() << " " << lighthouse.status() << std::endl;
        next_status += std::chrono::milliseconds(static_cast<int64_t>(status_every * 1000));
      }
    }
    std::cout << "LIGHTHOUSE stopped after " << lighthouse.quorums() << " quorums" << std::endl;
  } catch (const std::exception& e) {
    std::cerr << e.what() << std::endl;
    return 1;
  }
  return 0;
}
