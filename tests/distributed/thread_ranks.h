#pragma once
// Ranks as threads (pytorch's ProcessGroupGlooTest style): every thread joins the same group over
// Gloo on 127.0.0.1 with its own Communicator, on a port found free just before.
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "distributed/communicator.h"

namespace volt::testing {

CommunicatorOptions loopback_options(int64_t rank, int64_t world_size, int64_t port,
                                     std::chrono::milliseconds timeout = std::chrono::seconds(30));

// Runs `body(rank, port)` on `world_size` threads and joins them. Returns one entry per rank:
// empty when the body returned, the exception's message when it threw.
std::vector<std::string> run_thread_ranks(int64_t world_size, const std::function<void(int64_t rank, int64_t port)>& body);

// run_thread_ranks where each rank first connects; fails the test (naming the rank) when a body throws.
void with_communicators(int64_t world_size, const std::function<void(Communicator&)>& body,
                        std::chrono::milliseconds timeout = std::chrono::seconds(30));
// The same, each rank's loopback options changed by `adjust` before it connects.
void with_communicators(int64_t world_size, const std::function<void(CommunicatorOptions&)>& adjust,
                        const std::function<void(Communicator&)>& body,
                        std::chrono::milliseconds timeout = std::chrono::seconds(30));

}  // namespace volt::testing
