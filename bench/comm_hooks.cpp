// volt's DDP comm hooks against plain all_reduce and against PyTorch's own hooks (Debian's
// python3-torch 1.13, bench/comm_hooks_worker.py): step time and bytes per step of every hook,
// on a ~10M-parameter MLP, two ranks as processes, one compute thread each, on loopback and on a
// veth link between two network namespaces limited to 1 Gbit/s and to 100 Mbit/s.
//
// Each round runs every hook once on each side (volt, then PyTorch), so hooks and sides
// interleave in time; a run reports its median step (barrier before every step; forward,
// backward, reduction and SGD step timed) after warm-up steps that include DDP's bucket rebuild
// and PowerSGD's start (start_powersgd_iter=2). The table shows medians over rounds, each hook
// against allreduce measured in the same run, and volt against PyTorch.
//
// PyTorch's PowerSGD hooks run with each bucket waited before the next is launched: as DDP
// launches them, PyTorch 1.13's hang or abort on Gloo with several buckets (comm_hooks_worker.py).
//
// Bytes per step: the payload the hook handed to collectives in the last step, from volt's
// counters (Reducer::last_traffic, what DDP logs as comm_hook/step_bytes) and, for PyTorch, from
// the hooks' formulas (the worker applies them to the buckets DDP hands it). Ring all_reduce puts
// about as many bytes on the wire per rank (2·(n−1)/n of the payload, n = 2).
//
//   build/bench/comm_hooks [--rounds 3] [--steps 5] [--warmup 3] [--links loopback,1gbit,100mbit]
//                          [--hooks allreduce,powersgd_r1,...] [--widths 1024,2048,2048,2048,10]
// volt's ranks are this program re-executed with --worker; PyTorch's are comm_hooks_worker.py.
// The rate-limited links need root (ip netns, tc); without it they are skipped, saying why.
#include <unistd.h>

#include <boost/program_options.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <regex>
#include <sstream>

#include "bench/bench_support.h"
#include "bench/mlp.h"
#include "bench/run_ranks.h"
#include "bench/veth_link.h"
#include "core/error.h"
#include "core/option_spec.h"
#include "distributed/network.h"
#include "strategies/ddp/comm_hook_registry.h"
#include "strategies/ddp/hooks/compression_wrapper.h"
#include "strategies/ddp/reducer.h"
#include "trainer/run_main.h"

namespace po = boost::program_options;

namespace {

using volt::bench::median;

struct Hook {
  std::string label;
  std::string spec;        // ddp:comm_hook=<spec>, plus ",comm_wrapper=bf16"
  bool torch_has = true;   // PyTorch 1.13 has no bfloat16 all_reduce on Gloo
};

const std::vector<Hook> kHooks{
    {"allreduce", "allreduce"},
    {"fp16_compress", "fp16_compress"},
    {"bf16_compress", "bf16_compress", false},
    {"noop", "noop"},
    {"powersgd_r1", "powersgd:matrix_approximation_rank=1,start_powersgd_iter=2"},
    {"powersgd_r4", "powersgd:matrix_approximation_rank=4,start_powersgd_iter=2"},
    {"batched_powersgd_r1", "batched_powersgd:matrix_approximation_rank=1,start_powersgd_iter=2"},
    {"bf16_wrapper_powersgd_r1", "powersgd:matrix_approximation_rank=1,start_powersgd_iter=2,comm_wrapper=bf16", false},
};

struct Link {
  std::string name;
  std::string rate;  // tc's rate; "" for loopback
  double bytes_per_second = 0;  // 0: unlimited
};

// The hook `spec` names, as `--strategy ddp:comm_hook=<spec>` builds it: the registry's, inside
// DDP's bf16 wrapper for comm_wrapper=bf16.
std::unique_ptr<volt::ddp::CommHook> hook_from_spec(volt::Communicator& communicator, std::string spec) {
  const std::string wrapper_key = ",comm_wrapper=bf16";
  const auto at = spec.find(wrapper_key);
  if (at != std::string::npos) spec.erase(at, wrapper_key.size());
  auto& registry = volt::ddp::comm_hook_registry();
  auto hook =
      registry.create(volt::parse_named_spec(spec, "comm_hooks").name, registry.parse(spec))->make(communicator);
  if (at == std::string::npos) return hook;
  return std::make_unique<volt::ddp::CompressionWrapper>(torch::kBFloat16, std::move(hook));
}

// One volt rank: the loop comm_hooks_worker.py runs. Rank 0 prints STEP_MS and STEP_BYTES.
int run_worker(int64_t rank, const std::string& master, int64_t port, const std::string& spec,
               const std::string& widths_text, int64_t batch, double bucket_mb, int steps, int warmup) {
  torch::set_num_threads(1);
  volt::CommunicatorOptions options;
  options.rank = rank;
  options.world_size = 2;
  options.master_addr = master;
  options.master_port = port;
  options.timeout = std::chrono::minutes(10);
  // The ranks may sit in two network namespaces of this host joined by a throttled link: the
  // bytes must cross it, not a shared-memory segment (Note [Collectives through shared memory]).
  options.shared_memory = false;
  auto comm = volt::Communicator::connect(options);
  torch::manual_seed(0);
  const auto widths = volt::bench::parse_widths(widths_text);
  auto model = volt::bench::make_mlp<torch::nn::Tanh>(widths);
  const auto names = volt::bench::parameter_names(*model);
  volt::ddp::ReducerOptions reducer_options;
  reducer_options.bucket_cap_mb = bucket_mb;
  volt::ddp::Reducer reducer(model->parameters(), names, *comm, reducer_options);
  reducer.set_comm_hook(hook_from_spec(*comm, spec));
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(1e-3));
  torch::manual_seed(1 + rank);
  const auto x = torch::randn({batch, widths.front()});
  const auto y = torch::randn({batch, widths.back()});
  const auto times = volt::bench::timed_steps(warmup, steps, [&] { comm->barrier(); }, [&] {
    auto loss = torch::mse_loss(model->forward(x), y);
    reducer.prepare_for_backward(loss);
    loss.backward();
    reducer.finalize_backward();
    optimizer.step();
    for (auto& p : model->parameters()) p.mutable_grad().reset();
  });
  // Data parallel training leaves both ranks with the same parameters (except without communication).
  double checksum = 0;
  for (const auto& p : model->parameters()) checksum += p.to(torch::kDouble).sum().item<double>();
  auto both = comm->all_gather(torch::tensor({checksum}, torch::kDouble));
  if (spec != "noop" && both[0].item<double>() != both[1].item<double>()) {
    std::fprintf(stderr, "comm_hooks: rank %lld: the ranks' parameters differ after training\n",
                 static_cast<long long>(rank));
    return 3;
  }
  if (rank == 0) {
    std::printf("STEP_MS %.4f\nSTEP_BYTES %lld\n", median(times),
                static_cast<long long>(reducer.last_traffic().hook_bytes));
    std::fflush(stdout);
  }
  return 0;
}

double number_after(const std::string& output, const std::string& key) {
  const std::regex pattern(key + " ([0-9.eE+-]+)");
  std::smatch match;
  volt::check<volt::Error>(std::regex_search(output, match, pattern), "comm_hooks: no ", key, " in: ", output);
  return std::stod(match[1]);
}

struct Measurement {
  double ms = NAN;
  double bytes = NAN;
  int failures = 0;  // runs that hung or failed before one completed
};

struct Runner {
  std::string program, script, widths;
  int64_t batch = 32;
  double bucket_mb = 25;
  int steps = 5, warmup = 3, attempts = 3;
  double model_bytes = 0;

  // One run of `hook` on one side over `link` (`veth` for the limited ones), retried when it
  // hangs or fails; NAN when no attempt completes.
  Measurement run(const Hook& hook, bool torch_side, const Link& link, volt::bench::VethLink* veth) const {
    Measurement m;
    // Generous: three times what the plain all_reduce needs at the link's rate, plus start-up.
    const double per_step_s = link.bytes_per_second > 0 ? 2 * model_bytes / link.bytes_per_second : 1;
    const auto limit = std::chrono::seconds(60 + static_cast<int64_t>(3 * per_step_s * (steps + warmup)));
    for (int attempt = 0; attempt < attempts; ++attempt) {
      const auto port = std::to_string(volt::find_free_port());
      std::vector<std::vector<std::string>> argv(2);
      std::vector<std::map<std::string, std::string>> env(2);
      for (int rank = 0; rank < 2; ++rank) {
        if (veth) argv[rank] = veth->exec_prefix(rank);
        const std::string master = veth ? veth->address(0) : "127.0.0.1";
        const std::vector<std::string> tail{std::to_string(rank), master, port, hook.spec, widths,
                                            std::to_string(batch), std::to_string(bucket_mb), std::to_string(steps),
                                            std::to_string(warmup)};
        if (torch_side) {
          argv[rank].insert(argv[rank].end(), {"/usr/bin/python3", script});
        } else {
          argv[rank].insert(argv[rank].end(), {program, "--worker"});
        }
        argv[rank].insert(argv[rank].end(), tail.begin(), tail.end());
        env[rank] = {{"OMP_NUM_THREADS", "1"}, {"OPENBLAS_NUM_THREADS", "1"},
                     {"GLIBC_TUNABLES", volt::bench::kTrainerMallocTunables}};
        if (veth) env[rank]["GLOO_SOCKET_IFNAME"] = veth->interface(rank);
      }
      const auto result = volt::bench::run_ranks(argv, env, limit);
      if (result.ok()) {
        m.ms = number_after(result.output, "STEP_MS");
        m.bytes = number_after(result.output, "STEP_BYTES");
        return m;
      }
      ++m.failures;
      std::fprintf(stderr, "comm_hooks: %s %s over %s: attempt %d %s\n", torch_side ? "PyTorch" : "volt",
                   hook.label.c_str(), link.name.c_str(), attempt + 1, result.describe().c_str());
    }
    return m;
  }
};

std::string cell(double value, const char* format) {
  if (std::isnan(value)) return "n/a";
  char text[64];
  std::snprintf(text, sizeof text, format, value);
  return text;
}

void print_table(const Link& link, const std::vector<Hook>& hooks, const std::map<std::string, Measurement>& volt,
                 const std::map<std::string, Measurement>& torch) {
  const double volt_base = volt.at("allreduce").ms, torch_base = torch.at("allreduce").ms;
  std::printf("\n%s\n", link.name.c_str());
  std::printf("| %-25s | %9s | %8s | %9s | %8s | %10s | %12s | %12s | %11s |\n", "hook", "volt ms", "vs allr.",
              "torch ms", "vs allr.", "volt/torch", "volt B/step", "torch B/step", "B vs allr.");
  std::printf("|%s|%s|%s|%s|%s|%s|%s|%s|%s|\n", std::string(27, '-').c_str(), std::string(11, '-').c_str(),
              std::string(10, '-').c_str(), std::string(11, '-').c_str(), std::string(10, '-').c_str(),
              std::string(12, '-').c_str(), std::string(14, '-').c_str(), std::string(14, '-').c_str(),
              std::string(13, '-').c_str());
  for (const auto& hook : hooks) {
    const auto& v = volt.at(hook.label);
    const auto& t = torch.at(hook.label);
    std::string failures;
    if (v.failures) failures += " (volt: " + std::to_string(v.failures) + " failed runs)";
    if (t.failures) failures += " (torch: " + std::to_string(t.failures) + " failed runs)";
    std::printf("| %-25s | %9s | %8s | %9s | %8s | %10s | %12s | %12s | %11s |%s\n", hook.label.c_str(),
                cell(v.ms, "%.1f").c_str(), cell(v.ms / volt_base, "%.3fx").c_str(), cell(t.ms, "%.1f").c_str(),
                cell(t.ms / torch_base, "%.3fx").c_str(), cell(v.ms / t.ms, "%.2fx").c_str(),
                cell(v.bytes, "%.0f").c_str(), cell(t.bytes, "%.0f").c_str(),
                cell(v.bytes / volt.at("allreduce").bytes, "%.5f").c_str(), failures.c_str());
  }
  std::fflush(stdout);
}

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> parts;
  std::stringstream in(text);
  std::string part;
  while (std::getline(in, part, ',')) parts.push_back(part);
  return parts;
}

}  // namespace

int main(int argc, char** argv) {
  return volt::run_main([&] {
    po::options_description flags("comm_hooks");
    std::string links_text, hooks_text;
    Runner runner;
    int rounds = 3;
    flags.add_options()("help", "this text")("rounds", po::value(&rounds)->default_value(3), "interleaved rounds")(
        "steps", po::value(&runner.steps)->default_value(5), "timed steps per run")(
        "warmup", po::value(&runner.warmup)->default_value(3), "untimed steps per run (>= 3: rebuild, PowerSGD start)")(
        "links", po::value(&links_text)->default_value("loopback,1gbit,100mbit"), "loopback and/or tc rates")(
        "hooks", po::value(&hooks_text)->default_value(""), "labels of the hooks to run (default: all)")(
        "widths", po::value(&runner.widths)->default_value("1024,2048,2048,2048,10"), "the MLP's layer widths")(
        "batch", po::value(&runner.batch)->default_value(32), "samples per rank and step")(
        "bucket-cap-mb", po::value(&runner.bucket_mb)->default_value(25), "DDP's bucket_cap_mb, both sides")(
        "worker", po::value<std::vector<std::string>>()->multitoken(), "internal: run one volt rank");
    po::variables_map vm;
    po::store(po::parse_command_line(argc, argv, flags), vm);
    po::notify(vm);
    if (vm.count("help")) {
      std::cout << flags;
      return;
    }
    if (vm.count("worker")) {
      const auto& w =
          vm["worker"].as<std::vector<std::string>>();  // rank master port spec widths batch mb steps warmup
      std::exit(run_worker(std::stoll(w.at(0)), w.at(1), std::stoll(w.at(2)), w.at(3), w.at(4), std::stoll(w.at(5)),
                           std::stod(w.at(6)), std::stoi(w.at(7)), std::stoi(w.at(8))));
    }
    volt::check<volt::ConfigurationError>(runner.warmup >= 3, "comm_hooks: expected --warmup >= 3 (the bucket rebuild "
                                          "and PowerSGD's first compressed step are not timed), got ", runner.warmup);
    char exe[4096];
    const ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    volt::check<volt::Error>(len > 0, "comm_hooks: cannot read /proc/self/exe");
    runner.program.assign(exe, static_cast<size_t>(len));
    runner.script = std::string(VOLT_SOURCE_DIR) + "/bench/comm_hooks_worker.py";
    const auto widths = volt::bench::parse_widths(runner.widths);
    int64_t parameters = 0;
    for (size_t i = 0; i + 1 < widths.size(); ++i) parameters += widths[i] * widths[i + 1] + widths[i + 1];
    runner.model_bytes = 4.0 * static_cast<double>(parameters);

    std::vector<Hook> hooks;
    for (const auto& hook : kHooks) {
      if (hooks_text.empty() || ("," + hooks_text + ",").find("," + hook.label + ",") != std::string::npos) {
        hooks.push_back(hook);
      }
    }
    volt::check<volt::ConfigurationError>(!hooks.empty() && hooks.front().label == "allreduce",
                                          "comm_hooks: --hooks must include allreduce (the baseline), got '",
                                          hooks_text, "'");
    std::vector<Link> links;
    for (const auto& name : split(links_text)) {
      if (name == "loopback") {
        links.push_back({name, "", 0});
      } else {
        const double number = std::atof(name.c_str());
        const double bits = name.find("gbit") != std::string::npos ? number * 1e9 : number * 1e6;
        links.push_back({name, name, bits / 8});
      }
    }
    std::unique_ptr<volt::bench::VethLink> veth;
    std::printf("volt comm hooks vs allreduce and vs PyTorch's hooks (/usr/bin/python3, torch 1.13), 2 ranks, MLP %s "
                "(%lld parameters, %.1f MB of float32 gradients), batch %lld per rank, bucket_cap_mb %g, SGD,\n"
                "1 thread per rank, %d rounds interleaved, %d timed steps (+%d warm-up) per run; median ms per step; "
                "bytes: payload handed to collectives in one step (torch: the hook's formula)\n",
                runner.widths.c_str(), static_cast<long long>(parameters), runner.model_bytes / 1e6,
                static_cast<long long>(runner.batch), runner.bucket_mb, rounds, runner.steps, runner.warmup);
    for (const auto& link : links) {
      if (!link.rate.empty()) {
        if (!veth) veth = std::make_unique<volt::bench::VethLink>();
        if (!veth->ok()) {
          std::printf("\n%s: skipped, no network namespaces here: %s\n", link.name.c_str(), veth->error().c_str());
          continue;
        }
        const auto failure = veth->set_rate(link.rate);
        if (!failure.empty()) {
          std::printf("\n%s: skipped, tc failed: %s\n", link.name.c_str(), failure.c_str());
          continue;
        }
      }
      volt::bench::VethLink* through = link.rate.empty() ? nullptr : veth.get();
      std::map<std::string, std::vector<double>> volt_ms, torch_ms;
      std::map<std::string, Measurement> volt_result, torch_result;
      for (int round = 0; round < rounds; ++round) {
        for (const auto& hook : hooks) {
          auto v = runner.run(hook, false, link, through);
          volt_ms[hook.label].push_back(v.ms);
          volt_result[hook.label].bytes = v.bytes;
          volt_result[hook.label].failures += v.failures;
          auto& t = torch_result[hook.label];
          if (!hook.torch_has) continue;
          auto measured = runner.run(hook, true, link, through);
          torch_ms[hook.label].push_back(measured.ms);
          t.bytes = measured.bytes;
          t.failures += measured.failures;
        }
      }
      auto median_of = [](const std::vector<double>& values) {
        std::vector<double> finite;
        for (const double v : values) {
          if (!std::isnan(v)) finite.push_back(v);
        }
        return finite.empty() ? NAN : median(finite);
      };
      for (const auto& hook : hooks) {
        volt_result[hook.label].ms = median_of(volt_ms[hook.label]);
        torch_result[hook.label].ms = median_of(torch_ms[hook.label]);
      }
      print_table(link, hooks, volt_result, torch_result);
    }
  });
}
