// What volt's Communicator adds over c10d itself: all_reduce of the same float32 tensors through
// a raw c10d ProcessGroupGloo and through volt::Communicator (timeout, counters, error context,
// peer monitor), two ranks on 127.0.0.1, in one process (a thread per rank). Rounds alternate
// raw / volt; per size the median time per all_reduce of each is compared. Target: ratio <= 1.00;
// sizes up to 1 MiB take volt's inline path (Note [Inline all_reduce]), larger ones the same
// process group as the baseline, where only volt's bookkeeping differs.
// This benchmark includes c10d itself, for the baseline; volt's own code reaches c10d only
// through distributed/communicator.
//
//   build/bench/communicator_overhead [--rounds 7] [--iterations 200]
#include <boost/program_options.hpp>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <thread>

#include "bench/bench_support.h"
#include "distributed/c10d_compat.h"
#include "distributed/communicator.h"
#include "trainer/run_main.h"
#include "distributed/network.h"

namespace {

using Clock = std::chrono::steady_clock;

using volt::bench::median;

// Fewer calls for big tensors, so that every size takes about as long.
int calls_for(int64_t elements, int iterations) {
  return static_cast<int>(std::max<int64_t>(10, std::min<int64_t>(iterations, iterations * 65536 / elements)));
}

struct Result {
  std::vector<double> raw_us, volt_us;  // per round: mean µs per all_reduce
};

// Rank `rank` of 2: builds both groups, then for each size alternates raw and volt rounds. The
// barrier keeps the two ranks entering each timed loop together.
void run_rank(int rank, int64_t raw_port, int64_t volt_port, const std::vector<int64_t>& sizes, int rounds,
              int iterations, std::barrier<>& sync, std::vector<Result>& results) {
  c10d::TCPStoreOptions store_options;
  store_options.port = static_cast<std::uint16_t>(raw_port);
  store_options.isServer = rank == 0;
  store_options.numWorkers = 2;
  auto store = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", store_options);
  auto gloo_options = c10d::ProcessGroupGloo::Options::create(std::chrono::seconds(60));
  gloo_options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  auto raw = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, 2, gloo_options);

  volt::CommunicatorOptions options;
  options.rank = rank;
  options.world_size = 2;
  options.master_port = volt_port;
  options.timeout = std::chrono::seconds(60);
  auto communicator = volt::Communicator::connect(options);

  for (size_t s = 0; s < sizes.size(); ++s) {
    const int n = calls_for(sizes[s], iterations);
    auto tensor = torch::ones({sizes[s]});
    std::vector<at::Tensor> tensors{tensor};
    for (int i = 0; i < 10; ++i) raw->allreduce(tensors)->wait();  // warm up both paths
    for (int i = 0; i < 10; ++i) communicator->all_reduce(tensor);
    for (int round = 0; round < rounds; ++round) {
      sync.arrive_and_wait();
      auto start = Clock::now();
      for (int i = 0; i < n; ++i) raw->allreduce(tensors)->wait();
      const double raw_us = std::chrono::duration<double, std::micro>(Clock::now() - start).count() / n;
      sync.arrive_and_wait();
      start = Clock::now();
      for (int i = 0; i < n; ++i) communicator->all_reduce(tensor);
      const double volt_us = std::chrono::duration<double, std::micro>(Clock::now() - start).count() / n;
      if (rank == 0) {
        results[s].raw_us.push_back(raw_us);
        results[s].volt_us.push_back(volt_us);
      }
    }
  }
  sync.arrive_and_wait();
}

}  // namespace

int main(int argc, char** argv) {
  return volt::run_main([&] {
    namespace po = boost::program_options;
    po::options_description flags("communicator_overhead");
    flags.add_options()("rounds", po::value<int>()->default_value(7), "alternating raw/volt rounds per size")(
        "iterations", po::value<int>()->default_value(200), "all_reduces per round");
    po::variables_map vm;
    po::store(po::parse_command_line(argc, argv, flags), vm);
    const int rounds = vm["rounds"].as<int>(), iterations = vm["iterations"].as<int>();

    torch::set_num_threads(1);
    const std::vector<int64_t> sizes{256, 16384, 262144, 4194304};  // float32: 1 KiB to 16 MiB
    std::vector<Result> results(sizes.size());
    std::barrier<> sync(2);
    const int64_t raw_port = volt::find_free_port(), volt_port = volt::find_free_port();
    std::thread other([&] { run_rank(1, raw_port, volt_port, sizes, rounds, iterations, sync, results); });
    run_rank(0, raw_port, volt_port, sizes, rounds, iterations, sync, results);
    other.join();

    std::printf("all_reduce (sum, float32), 2 ranks (threads) over Gloo on 127.0.0.1; median over %d rounds\n",
                rounds);
    std::printf("%12s %8s %14s %14s %10s\n", "bytes", "calls", "c10d (us)", "volt (us)", "volt/c10d");
    for (size_t s = 0; s < sizes.size(); ++s) {
      const double raw = median(results[s].raw_us), mine = median(results[s].volt_us);
      std::printf("%12lld %8d %14.1f %14.1f %10.3f\n", static_cast<long long>(sizes[s] * 4),
                  calls_for(sizes[s], iterations), raw, mine, mine / raw);
    }
  });
}
