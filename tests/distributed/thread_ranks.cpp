#include "tests/distributed/thread_ranks.h"

#include <gtest/gtest.h>

#include <thread>

#include "distributed/network.h"

namespace volt::testing {

CommunicatorOptions loopback_options(int64_t rank, int64_t world_size, int64_t port,
                                     std::chrono::milliseconds timeout) {
  CommunicatorOptions options;
  options.rank = rank;
  options.world_size = world_size;
  options.master_addr = "127.0.0.1";
  options.master_port = port;
  options.timeout = timeout;
  return options;
}

std::vector<std::string> run_thread_ranks(int64_t world_size,
                                          const std::function<void(int64_t rank, int64_t port)>& body) {
  const int64_t port = find_free_port();
  std::vector<std::string> errors(static_cast<size_t>(world_size));
  std::vector<std::thread> threads;
  for (int64_t rank = 0; rank < world_size; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        body(rank, port);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(rank)] = e.what();
        if (errors[static_cast<size_t>(rank)].empty()) errors[static_cast<size_t>(rank)] = "(empty message)";
      }
    });
  }
  for (auto& thread : threads) thread.join();
  return errors;
}

void with_communicators(int64_t world_size, const std::function<void(Communicator&)>& body,
                        std::chrono::milliseconds timeout) {
  with_communicators(world_size, [](CommunicatorOptions&) {}, body, timeout);
}

void with_communicators(int64_t world_size, const std::function<void(CommunicatorOptions&)>& adjust,
                        const std::function<void(Communicator&)>& body, std::chrono::milliseconds timeout) {
  const auto errors = run_thread_ranks(world_size, [&](int64_t rank, int64_t port) {
    auto options = loopback_options(rank, world_size, port, timeout);
    adjust(options);
    auto communicator = Communicator::connect(options);
    body(*communicator);
  });
  for (size_t rank = 0; rank < errors.size(); ++rank) {
    EXPECT_EQ(errors[rank], "") << "rank " << rank << " of " << world_size << " threw";
  }
}

}  // namespace volt::testing
