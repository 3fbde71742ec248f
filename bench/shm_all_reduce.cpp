// all_reduce through shared memory (Note [Collectives through shared memory]) against the
// physical limit and against Gloo (issue 36): per size, 4 KB to 64 MB of float32,
//   memcpy     this machine's copy bandwidth, one thread (bytes copied / time): the limit;
//   shm        SharedMemoryGroup::all_reduce of a tensor of the rank's own, through the segment's
//              slots, bus bandwidth (bytes × 2(N-1)/N / time, NCCL's convention: what each rank
//              moves);
//   in place   the same of a tensor in buffers of SharedMemoryGroup::allocate_buffers (what DDP's
//              buckets are through shared memory: Note [all_reduce in place through shared
//              memory]), bus bandwidth;
//   Gloo       volt's Communicator::all_reduce with CommunicatorOptions::shared_memory off (Gloo
//              over TCP loopback; up to 1 MiB on the calling thread, Note [Inline all_reduce]),
//              bus bandwidth.
// N processes on this host, one compute thread each; per size the three all_reduces alternate over
// rounds, each round a timed loop started by a barrier; the medians are shown.
//
//   build/bench/shm_all_reduce [--ranks 2,4] [--rounds 5] [--slot-kb 4096]
// --slot-kb: the segment's slot per rank, the chunk of a reduction (SharedMemoryGroup's default:
// 4096).
#include <boost/program_options.hpp>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <vector>

#include "bench/bench_support.h"
#include "distributed/communicator.h"
#include "distributed/network.h"
#include "distributed/transports/shared_memory_group.h"
#include "trainer/run_main.h"

namespace {

using Clock = std::chrono::steady_clock;
using volt::bench::median;

const std::vector<int64_t> kSizes{4 << 10, 64 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20};

// Repetitions of one timed loop: about 64 MB of traffic, at least 5.
int iterations_for(int64_t bytes) { return static_cast<int>(std::clamp<int64_t>((int64_t{64} << 20) / bytes, 5, 500)); }

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// Median seconds per copy of `bytes`, one thread.
double memcpy_seconds(int64_t bytes, int rounds) {
  std::vector<char> from(static_cast<size_t>(bytes), 1), to(static_cast<size_t>(bytes), 0);
  std::memcpy(to.data(), from.data(), to.size());  // faulted in
  std::vector<double> times;
  const int iterations = iterations_for(bytes);
  for (int round = 0; round < rounds; ++round) {
    const auto start = Clock::now();
    for (int i = 0; i < iterations; ++i) {
      std::memcpy(to.data(), from.data(), to.size());
      from[static_cast<size_t>(i) % from.size()] ^= 1;  // no copy is elided
    }
    times.push_back(seconds_since(start) / iterations);
  }
  return median(times);
}

// One rank: prints, on rank 0, "SIZE <bytes> shm <s> inplace <s> gloo <s>" per size.
void run_worker(int64_t rank, int64_t world, int64_t port, int rounds, int64_t slot_kb) {
  torch::set_num_threads(1);
  volt::CommunicatorOptions options;
  options.rank = rank;
  options.world_size = world;
  options.master_port = port;
  options.timeout = std::chrono::seconds(120);
  options.shared_memory = false;  // the baseline: Gloo as volt used it before (the group is joined below)
  auto communicator = volt::Communicator::connect(options);
  std::string why_not;
  auto group = volt::SharedMemoryGroup::join([&](const std::string& b) { return communicator->all_gather_bytes(b); },
                                             rank, world, options.timeout, "shm_all_reduce",
                                             static_cast<size_t>(slot_kb) << 10, &why_not);
  volt::check<volt::Error>(group != nullptr, "shm_all_reduce: no shared-memory group: ", why_not);
  enum Transport { kSlots, kInPlace, kGloo };
  for (const int64_t bytes : kSizes) {
    auto tensor = torch::ones({bytes / 4});
    auto buffers = group->allocate_buffers([&](const std::string& b) { return communicator->all_gather_bytes(b); },
                                           {bytes / 4}, {torch::kFloat});
    volt::check<volt::Error>(!buffers.empty(), "shm_all_reduce: no shared-memory buffers of ", bytes, " bytes");
    auto in_place = buffers[0];
    in_place.fill_(1);
    const int iterations = iterations_for(bytes);
    std::vector<double> times[3];
    // Warm-up: pages and connections.
    group->all_reduce(tensor, volt::ReduceOp::Sum);
    group->all_reduce(in_place, volt::ReduceOp::Sum);
    communicator->all_reduce(tensor);
    for (int round = 0; round < rounds; ++round) {
      for (int k = 0; k < 3; ++k) {
        const auto transport = static_cast<Transport>((round + k) % 3);
        communicator->barrier();
        // The values grow by N each time and reach infinity, which x86 adds at full speed.
        const auto start = Clock::now();
        for (int i = 0; i < iterations; ++i) {
          if (transport == kSlots) {
            group->all_reduce(tensor, volt::ReduceOp::Sum);
          } else if (transport == kInPlace) {
            group->all_reduce(in_place, volt::ReduceOp::Sum);
          } else {
            communicator->all_reduce(tensor);
          }
        }
        times[transport].push_back(seconds_since(start) / iterations);
      }
    }
    if (rank == 0) {
      std::printf("SIZE %lld shm %.9f inplace %.9f gloo %.9f\n", static_cast<long long>(bytes), median(times[kSlots]),
                  median(times[kInPlace]), median(times[kGloo]));
    }
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  return volt::run_main([&] {
    namespace po = boost::program_options;
    std::string ranks = "2,4";
    int rounds = 5;
    int64_t slot_kb = 4096;
    int64_t worker_rank = -1, worker_world = 0, worker_port = 0;
    po::options_description description("shm_all_reduce");
    description.add_options()("help", "this text")("ranks", po::value(&ranks)->default_value(ranks),
                                                   "world sizes, comma-separated")(
        "rounds", po::value(&rounds)->default_value(rounds), "timed loops per size and transport")(
        "slot-kb", po::value(&slot_kb)->default_value(slot_kb), "the shared-memory slot per rank in KiB (a chunk)")(
        "worker-rank", po::value(&worker_rank), "internal")("worker-world", po::value(&worker_world), "internal")(
        "worker-port", po::value(&worker_port), "internal");
    if (!volt::bench::parse_flags(argc, argv, description)) return;
    if (worker_rank >= 0) {
      run_worker(worker_rank, worker_world, worker_port, rounds, slot_kb);
      return;
    }
    const std::string program = volt::bench::self_path("shm_all_reduce");
    std::vector<double> memcpy_gbps;
    for (const int64_t bytes : kSizes)
      memcpy_gbps.push_back(static_cast<double>(bytes) / memcpy_seconds(bytes, rounds) / 1e9);
    std::printf(
        "all_reduce of float32 through shared memory (through the slots, and in place in shared buffers) vs Gloo "
        "(volt's Communicator), processes on this host, "
        "1 thread each, median of %d timed loops; GB/s (1e9 bytes): memcpy = bytes / time of one thread's "
        "copy; busbw = bytes x 2(N-1)/N / time; slot (chunk) %lld KiB.\n\n",
        rounds, static_cast<long long>(slot_kb));
    std::stringstream list(ranks);
    for (std::string item; std::getline(list, item, ',');) {
      const int64_t world = std::stoll(item);
      const int64_t port = volt::find_free_port();
      std::vector<std::vector<std::string>> argvs;
      for (int64_t r = 0; r < world; ++r) {
        argvs.push_back({program, "--worker-rank", std::to_string(r), "--worker-world", std::to_string(world),
                         "--worker-port", std::to_string(port), "--rounds", std::to_string(rounds), "--slot-kb",
                         std::to_string(slot_kb)});
      }
      const auto output = volt::bench::run_processes(argvs, {}, "shm_all_reduce");
      std::printf("%lld ranks\n\n| bytes | memcpy GB/s | shm busbw GB/s | shm in place busbw GB/s | Gloo busbw GB/s | "
                  "shm / memcpy | in place / memcpy | in place vs Gloo |\n|---|---|---|---|---|---|---|---|\n",
                  static_cast<long long>(world));
      for (size_t s = 0; s < kSizes.size(); ++s) {
        const std::string key = "SIZE " + std::to_string(kSizes[s]) + " ";
        const double shm = volt::bench::number_after(output, key + "shm ", "shm_all_reduce");
        const double in_place = volt::bench::number_after(output, key + "shm [0-9.eE+-]+ inplace ", "shm_all_reduce");
        const double gloo =
            volt::bench::number_after(output, key + "shm [0-9.eE+-]+ inplace [0-9.eE+-]+ gloo ", "shm_all_reduce");
        const double moved =
            static_cast<double>(kSizes[s]) * 2.0 * static_cast<double>(world - 1) / static_cast<double>(world);
        const double shm_bw = moved / shm / 1e9, in_place_bw = moved / in_place / 1e9, gloo_bw = moved / gloo / 1e9;
        std::printf("| %lld | %.2f | %.2f | %.2f | %.2f | %.0f%% | %.0f%% | %.1fx |\n",
                    static_cast<long long>(kSizes[s]), memcpy_gbps[s], shm_bw, in_place_bw, gloo_bw,
                    100.0 * shm_bw / memcpy_gbps[s], 100.0 * in_place_bw / memcpy_gbps[s], gloo / in_place);
      }
      std::printf("\n");
      std::fflush(stdout);
    }
  });
}
