// volt's DDP against PyTorch's own DistributedDataParallel (Debian's python3-torch, the same
// LibTorch version and OpenBLAS underneath): the same MLP, batch, bucket size and SGD step, two
// ranks as processes over Gloo on 127.0.0.1, one compute thread per rank. Rounds interleave volt
// and PyTorch; each run reports its median step time (after warm-up, with a barrier before every
// step), and the table shows the median over rounds and the ratio volt / PyTorch.
//
// Columns: volt over Gloo, volt through shared memory (Note [Collectives through shared memory],
// the Trainer's default on one host), PyTorch over Gloo.
// Rows: a ~100K- and a ~10M-parameter MLP with DDP; the large one with gradient_as_bucket_view on
// both sides (no copy between gradients and buckets); both with every step inside no_sync (the
// price of communication is the difference); a bucket-size sweep {1, 5, 25, 100} MB on the large
// model; and the gradient memory of volt with and without gradient_as_bucket_view.
//
//   build/bench/ddp_vs_torch [--rounds 3] [--steps 20] [--warmup 5] [--quick] [--glibc-defaults]
// volt's ranks are this program re-executed with --worker; PyTorch's are
// bench/ddp_vs_torch_worker.py run by /usr/bin/python3.
#include <unistd.h>

#include <boost/program_options.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <thread>
#include <unordered_set>

#include "bench/bench_support.h"
#include "bench/mlp.h"
#include "strategies/ddp/reducer.h"
#include "core/error.h"
#include "trainer/run_main.h"
#include "distributed/network.h"

namespace po = boost::program_options;

namespace {


using volt::bench::median;

// --inline-max-mb: volt's CommunicatorOptions::inline_all_reduce_max_bytes (negative: its default).
double g_inline_max_mb = -1;
// --shared-memory (a worker's): CommunicatorOptions::shared_memory, what the Trainer turns on.
bool g_shared_memory = false;

struct Config {
  std::string label;
  std::string widths;  // "256,256,128,10"
  int64_t batch = 64;  // per rank
  double bucket_mb = 25;
  bool no_sync = false;
  bool bucket_view = false;
};


// Bytes of distinct storages holding the gradients and the bucket buffers.
int64_t gradient_memory(const volt::ddp::Reducer& reducer) {
  std::unordered_set<const void*> seen;
  int64_t bytes = 0;
  auto add = [&](const torch::Tensor& t) {
    if (!t.defined()) return;
    const auto& storage = t.storage();
    if (seen.insert(storage.data()).second) bytes += static_cast<int64_t>(storage.nbytes());
  };
  for (const auto& p : reducer.parameters()) add(p.grad());
  for (size_t b = 0; b < reducer.num_buckets(); ++b) add(reducer.bucket(b).buffer());
  return bytes;
}

// One volt rank: the same loop as ddp_vs_torch_worker.py. Prints STEP_MS (and GRAD_BYTES) on rank 0.
int run_worker(int64_t rank, int64_t port, const Config& config, int steps, int warmup) {
  torch::set_num_threads(1);
  volt::CommunicatorOptions options;
  options.rank = rank;
  options.world_size = 2;
  options.master_port = port;
  options.timeout = std::chrono::seconds(120);
  if (g_inline_max_mb >= 0) options.inline_all_reduce_max_bytes = static_cast<int64_t>(g_inline_max_mb * (1 << 20));
  options.shared_memory = g_shared_memory;
  // As the Trainer sets it (process_group_setup.cpp): a thread for volt's collectives only when
  // each of the 2 ranks has a core to spare.
  options.ring_thread = std::thread::hardware_concurrency() / 2 >= 2;
  auto comm = volt::Communicator::connect(options);
  torch::manual_seed(0);
  const auto widths = volt::bench::parse_widths(config.widths);
  auto model = volt::bench::make_mlp(config.widths);
  const auto names = volt::bench::parameter_names(*model);
  volt::ddp::ReducerOptions reducer_options;
  reducer_options.bucket_cap_mb = config.bucket_mb;
  reducer_options.gradient_as_bucket_view = config.bucket_view;
  volt::ddp::Reducer reducer(model->parameters(), names, *comm, reducer_options);
  reducer.set_require_sync(!config.no_sync);
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(1e-3));
  torch::manual_seed(1 + rank);
  const auto x = torch::randn({config.batch, widths.front()});
  const auto y = torch::randn({config.batch, widths.back()});
  const auto times = volt::bench::timed_steps(warmup, steps, [&] { comm->barrier(); }, [&] {
    auto loss = torch::mse_loss(model->forward(x), y);
    reducer.prepare_for_backward(loss);
    loss.backward();
    reducer.finalize_backward();
    optimizer.step();
    for (auto& p : model->parameters()) {
      if (!p.grad().defined()) continue;
      if (config.bucket_view) {
        p.mutable_grad().zero_();
      } else {
        p.mutable_grad().reset();
      }
    }
  });
  if (rank == 0) {
    // Gradients as they stand during backward (before zero_grad freed them).
    auto loss = torch::mse_loss(model->forward(x), y);
    reducer.prepare_for_backward(loss);
    loss.backward();
    const int64_t grad_bytes = gradient_memory(reducer);
    reducer.finalize_backward();
    std::printf("STEP_MS %.4f\nGRAD_BYTES %lld\n", median(times), static_cast<long long>(grad_bytes));
    std::fflush(stdout);
  } else {
    auto loss = torch::mse_loss(model->forward(x), y);
    reducer.prepare_for_backward(loss);
    loss.backward();
    reducer.finalize_backward();
  }
  return 0;
}

// Both sides' workers run with the Trainer's allocator settings (see --glibc-defaults).
constexpr const char* kSameAllocatorForBoth = volt::bench::kTrainerMallocTunables;

bool g_glibc_defaults = false;

// Runs `argv` twice (ranks 0 and 1, the rank substituted for "{rank}"), returns rank 0's output.
std::string run_pair(const std::vector<std::string>& argv_template) {
  std::vector<std::vector<std::string>> argvs;
  for (int rank = 0; rank < 2; ++rank) {
    std::vector<std::string> args = argv_template;
    for (auto& a : args) {
      if (a == "{rank}") a = std::to_string(rank);
    }
    argvs.push_back(args);
  }
  std::vector<std::pair<std::string, std::string>> environment{{"OMP_NUM_THREADS", "1"}, {"OPENBLAS_NUM_THREADS", "1"}};
  if (!g_glibc_defaults) environment.emplace_back("GLIBC_TUNABLES", kSameAllocatorForBoth);
  return volt::bench::run_processes(argvs, environment, "ddp_vs_torch");
}

double number_after(const std::string& output, const std::string& key) {
  return volt::bench::number_after(output, key + " ", "ddp_vs_torch");
}

}  // namespace

int main(int argc, char** argv) {
  return volt::run_main([&] {
    po::options_description flags("ddp_vs_torch");
    flags.add_options()("rounds", po::value<int>()->default_value(3), "interleaved rounds per row")(
        "steps", po::value<int>()->default_value(20), "timed steps per run")(
        "warmup", po::value<int>()->default_value(5), "untimed steps per run")(
        "quick", po::bool_switch(), "only the two main rows")(
        "inline-max-mb", po::value(&g_inline_max_mb)->default_value(-1),
        "volt's inline all_reduce limit in MiB (0: off; default: the Communicator's 1 MiB)")(
        "shared-memory", po::value(&g_shared_memory)->default_value(false),
        "internal (a worker's): volt's collectives through shared memory")(
        "glibc-defaults", po::bool_switch(&g_glibc_defaults),
        "run both sides' workers with glibc's default malloc settings instead of the Trainer's")(
        "worker", po::value<std::vector<std::string>>()->multitoken(), "internal: run one volt rank");
    po::variables_map vm;
    po::store(po::parse_command_line(argc, argv, flags), vm);
    po::notify(vm);
    if (vm.count("worker")) {
      const auto& w =
          vm["worker"].as<std::vector<std::string>>();  // rank port widths batch mb no_sync view steps warmup
      Config c{"", w.at(2), std::stoll(w.at(3)), std::stod(w.at(4)), w.at(5) == "1", w.at(6) == "1"};
      std::exit(run_worker(std::stoll(w.at(0)), std::stoll(w.at(1)), c, std::stoi(w.at(7)), std::stoi(w.at(8))));
    }
    const int rounds = vm["rounds"].as<int>(), steps = vm["steps"].as<int>(), warmup = vm["warmup"].as<int>();
    const std::string self = "/proc/self/exe";
    char exe[4096];
    const ssize_t len = readlink(self.c_str(), exe, sizeof exe - 1);
    volt::check<volt::Error>(len > 0, "ddp_vs_torch: cannot read /proc/self/exe");
    const std::string program(exe, static_cast<size_t>(len));
    const std::string script = std::string(VOLT_SOURCE_DIR) + "/bench/ddp_vs_torch_worker.py";

    const std::string small = "256,256,128,10", large = "1024,2048,2048,2048,10";
    std::vector<Config> configs{{"small MLP, DDP", small, 64, 25, false, false},
                                {"large MLP, DDP", large, 32, 25, false, false},
                                {"large MLP, bucket view", large, 32, 25, false, true}};
    if (!vm["quick"].as<bool>()) {
      configs.push_back({"small MLP, no_sync", small, 64, 25, true, false});
      configs.push_back({"large MLP, no_sync", large, 32, 25, true, false});
      for (const double mb : {1.0, 5.0, 25.0, 100.0}) {
        configs.push_back({"large MLP, bucket " + std::to_string(static_cast<int>(mb)) + " MB", large, 32, mb, false,
                           false});
      }
    }
    std::printf("volt DDP (LibTorch %d.%d) vs PyTorch DDP (/usr/bin/python3), 2 ranks on one host, volt over Gloo\n"
                "on 127.0.0.1 and through shared memory (the Trainer's default), PyTorch over Gloo on 127.0.0.1,\n"
                "1 thread per rank, %d rounds interleaved, %d timed steps (+%d warm-up) per run; median ms per step;\n"
                "allocator for all: %s\n\n",
                TORCH_VERSION_MAJOR, TORCH_VERSION_MINOR, rounds, steps, warmup,
                g_glibc_defaults ? "glibc defaults" : kSameAllocatorForBoth);
    std::printf("| %-26s | %10s | %12s | %11s | %9s | %10s | %9s |\n", "case", "parameters", "volt Gloo ms",
                "volt shm ms", "torch ms", "Gloo/torch", "shm/torch");
    std::printf("|%s|%s|%s|%s|%s|%s|%s|\n", std::string(28, '-').c_str(), std::string(12, '-').c_str(),
                std::string(14, '-').c_str(), std::string(13, '-').c_str(), std::string(11, '-').c_str(),
                std::string(12, '-').c_str(), std::string(11, '-').c_str());
    for (const auto& c : configs) {
      std::vector<double> volt_ms, shm_ms, torch_ms;
      for (int round = 0; round < rounds; ++round) {
        for (const bool shm : {false, true}) {
          const auto port_v = std::to_string(volt::find_free_port());
          (shm ? shm_ms : volt_ms)
              .push_back(
                  number_after(run_pair({program, "--inline-max-mb", std::to_string(g_inline_max_mb), "--shared-memory",
                                         shm ? "1" : "0", "--worker", "{rank}", port_v, c.widths,
                                         std::to_string(c.batch), std::to_string(c.bucket_mb), c.no_sync ? "1" : "0",
                                         c.bucket_view ? "1" : "0", std::to_string(steps), std::to_string(warmup)}),
                               "STEP_MS"));
        }
        const auto port_t = std::to_string(volt::find_free_port());
        torch_ms.push_back(number_after(
            run_pair({"/usr/bin/python3", script, "{rank}", port_t, c.widths, std::to_string(c.batch),
                      std::to_string(c.bucket_mb), c.no_sync ? "1" : "0", std::to_string(steps),
                      std::to_string(warmup), c.bucket_view ? "1" : "0"}),
            "STEP_MS"));
      }
      const double v = median(volt_ms), m = median(shm_ms), t = median(torch_ms);
      std::printf("| %-26s | %10lld | %12.2f | %11.2f | %9.2f | %9.2fx | %8.2fx |\n", c.label.c_str(),
                  static_cast<long long>(volt::bench::mlp_parameter_count(c.widths)), v, m, t, v / t, m / t);
      std::fflush(stdout);
    }
    if (!vm["quick"].as<bool>()) {
      std::printf("\nvolt gradient memory during backward (gradients + bucket buffers), large MLP, 25 MB buckets:\n");
      for (const bool view : {false, true}) {
        const auto port = std::to_string(volt::find_free_port());
        const auto out = run_pair({program, "--inline-max-mb", std::to_string(g_inline_max_mb), "--worker", "{rank}",
                                   port, large, "32", "25", "0", view ? "1" : "0", "2", "1"});
        std::printf("  gradient_as_bucket_view=%-5s %8.1f MB\n", view ? "true" : "false",
                    number_after(out, "GRAD_BYTES") / (1 << 20));
      }
    }
  });
}
