// Post-local-SGD and SlowMo against DDP: step time and bytes per step for 2 "nodes" x 2 processes,
// over the loopback and over a rate-limited link between two network namespaces (a veth pair with a
// tc token bucket on both ends; needs root), for DDP, post-local-SGD with periods {2, 4, 8}
// (gradients within each node after the switch, the models averaged over the world every period
// steps), SlowMo (DDP within each node, the models averaged across nodes every localsgd_frequency
// steps, slow momentum every slowmo_frequency steps; sharded and whole buffers) and no
// communication at all (the compute alone).
//
// Each configuration runs 4 ranks as processes (this program re-executed with --worker): the
// volt Reducer with the post_local_sgd hook and its averager, as DDPStrategy composes them, or the
// Reducer on the node group with the SlowMomentumAverager, as SlowMoStrategy does, on an MLP with
// SGD, one compute thread per rank. After `--switch` untimed steps (post-local-SGD's
// start_local_sgd_iter), `--steps` steps (a multiple of 24: whole periods of 2, 4, 8 and of SlowMo's
// 3 and 12) are timed: a barrier, then forward, backward, reduction, optimizer step and averaging.
// Rank 0 reports the mean step time (the mean, not the median: every period-th step carries the
// average), the payload bytes per step over the world, the node leaders and its node (the
// Communicator's counters), and, on the shaped link, the bytes that crossed it (its interface's
// tx + rx counters in rank 0's namespace: every byte between the two "nodes", headers included).
//
//   build/bench/local_sgd_bench [--steps 24] [--switch 4] [--widths 256,512,256,10] [--batch 32]
//                               [--rate-mbit 100] [--no-veth] [--configs ddp,none,post_local_sgd,slowmo]
//                               [--localsgd-frequency 3] [--slowmo-frequency 12]
#include <unistd.h>

#include <boost/program_options.hpp>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <numeric>
#include <sstream>

#include "bench/bench_support.h"
#include "bench/mlp.h"
#include "core/error.h"
#include "distributed/network.h"
#include "distributed/topology.h"
#include "strategies/ddp/comm_hook_registry.h"
#include "strategies/ddp/reducer.h"
#include "strategies/slowmo/slowmo_strategy.h"
#include "strategies/strategy_registry.h"
#include "trainer/run_main.h"

namespace po = boost::program_options;

namespace {

using Clock = std::chrono::steady_clock;
constexpr int64_t kRanks = 4, kPerNode = 2;

struct WorkerArgs {
  int64_t rank = 0;
  std::string master_addr;
  int64_t port = 0;
  std::string hook;  // "allreduce", "noop", a "post_local_sgd:..." spec, or a "slowmo:..." strategy spec
  int64_t switch_steps = 4, steps = 16, batch = 32;
  std::string widths;
};

// Bytes sent and received by this network namespace's interfaces other than the loopback (the veth
// end, inside a shaped link's namespace); 0 outside one.
double link_bytes() {
  const std::string script =
      "for d in /sys/class/net/*; do [ \"$(basename $d)\" = lo ] || cat $d/statistics/tx_bytes $d/statistics/rx_bytes; "
      "done 2>/dev/null";
  FILE* pipe = popen(script.c_str(), "r");
  if (pipe == nullptr) return 0;
  double total = 0, value = 0;
  while (std::fscanf(pipe, "%lf", &value) == 1) total += value;
  pclose(pipe);
  return total;
}

// One rank: prints "RESULT step_ms=.. world_bytes=.. leaders_bytes=.. node_bytes=.. link_bytes=.." on rank 0.
int run_worker(const WorkerArgs& args) {
  torch::set_num_threads(1);
  volt::CommunicatorOptions options;
  options.rank = args.rank;
  options.world_size = kRanks;
  options.master_addr = args.master_addr;
  options.master_port = args.port;
  options.timeout = std::chrono::seconds(300);
  // The ranks may sit in two network namespaces of this host joined by a throttled link: the
  // bytes must cross it, not a shared-memory segment (Note [Collectives through shared memory]).
  options.shared_memory = false;
  auto world = volt::Communicator::connect(options);
  const volt::ProcessTopology process{.global_rank = args.rank,
                                      .world_size = kRanks,
                                      .local_rank = args.rank % kPerNode,
                                      .local_world_size = kPerNode,
                                      .node_rank = args.rank / kPerNode,
                                      .num_nodes = kRanks / kPerNode};
  // Every configuration builds the topology, so that all pay the same setup and the node group's
  // bytes are measured the same way.
  auto topology = volt::Topology::build(world, process);
  torch::manual_seed(0);
  const auto widths = volt::bench::parse_widths(args.widths);
  auto model = volt::bench::make_mlp(args.widths);
  const auto names = volt::bench::parameter_names(*model);
  constexpr double kLearningRate = 1e-3;
  std::unique_ptr<volt::ddp::Reducer> reducer;
  std::unique_ptr<volt::averaging::ModelAverager> averager;
  if (volt::parse_named_spec(args.hook, "--hook").name == "slowmo") {
    // As SlowMoStrategy composes them: DDP's reducer on the node group, the slow momentum averager.
    const auto strategy = std::dynamic_pointer_cast<volt::SlowMoStrategy>(volt::strategy_registry().create(args.hook));
    reducer =
        std::make_unique<volt::ddp::Reducer>(model->parameters(), names, topology->node(), volt::ddp::ReducerOptions{});
    auto slowmo = std::make_unique<volt::averaging::SlowMomentumAverager>(
        *topology, strategy->slowmo_options().averaging(),
        [n = model->parameters().size(), lr = kLearningRate] { return std::vector<double>(n, lr); });
    slowmo->initialize(model->parameters());
    averager = std::move(slowmo);
  } else {
    auto& registry = volt::ddp::comm_hook_registry();
    const auto spec = registry.create(volt::parse_named_spec(args.hook, "--hook").name, registry.parse(args.hook));
    reducer = std::make_unique<volt::ddp::Reducer>(model->parameters(), names, *world, volt::ddp::ReducerOptions{});
    reducer->set_comm_hook(spec->make(*world, topology.get()));
    if (const auto* on = spec->on_topology(); on && on->make_averager) averager = on->make_averager(*topology);
  }
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(kLearningRate));
  torch::manual_seed(1 + args.rank);
  const auto x = torch::randn({args.batch, widths.front()});
  const auto y = torch::randn({args.batch, widths.back()});
  std::vector<double> times;
  int64_t world_bytes = 0, node_bytes = 0, leaders_bytes = 0;
  const auto leaders_total = [&] {
    const auto* leaders = topology->leaders();
    return leaders && leaders != world.get() ? leaders->counters().total_bytes() : 0;
  };
  double link_before = 0;
  for (int64_t step = 0; step < args.switch_steps + args.steps; ++step) {
    world->barrier();
    const bool timed = step >= args.switch_steps;
    if (step == args.switch_steps && args.rank == 0) link_before = link_bytes();
    const auto world_before = world->counters().total_bytes();
    const auto node_before = topology->node().counters().total_bytes();
    const auto leaders_before = leaders_total();
    const auto start = Clock::now();
    auto loss = torch::mse_loss(model->forward(x), y);
    reducer->prepare_for_backward(loss);
    loss.backward();
    reducer->finalize_backward();
    optimizer.step();
    if (averager) averager->average_parameters(model->parameters());
    for (auto& p : model->parameters()) p.mutable_grad().reset();
    if (!timed) continue;
    times.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
    world_bytes += world->counters().total_bytes() - world_before;
    node_bytes += topology->node().counters().total_bytes() - node_before;
    leaders_bytes += leaders_total() - leaders_before;
  }
  world->barrier();
  if (args.rank == 0) {
    const double n = static_cast<double>(times.size());
    std::printf("RESULT step_ms=%.4f world_bytes=%.1f leaders_bytes=%.1f node_bytes=%.1f link_bytes=%.1f\n",
                std::accumulate(times.begin(), times.end(), 0.0) / n, static_cast<double>(world_bytes) / n,
                static_cast<double>(leaders_bytes) / n, static_cast<double>(node_bytes) / n,
                (link_bytes() - link_before) / n);
    std::fflush(stdout);
  }
  return 0;
}

double number_after(const std::string& output, const std::string& key) {
  return volt::bench::number_after(output, key + "=", "local_sgd_bench");
}

// Two network namespaces joined by a veth pair, each end shaped to `rate_mbit` by a token bucket.
class ShapedLink {
 public:
  explicit ShapedLink(double rate_mbit) {
    const std::string id = std::to_string(getpid() % 100000);
    a_ = "volt_lsgd_a" + id;
    b_ = "volt_lsgd_b" + id;
    const std::string subnet = "10.214." + std::to_string(getpid() % 200 + 10);
    address_a_ = subnet + ".1";
    const std::string va = "vla" + id, vb = "vlb" + id;
    const std::string rate = std::to_string(static_cast<int64_t>(rate_mbit)) + "mbit";
    const std::string setup =
        "ip netns add " + a_ + " && ip netns add " + b_ + " && ip link add " + va + " type veth peer name " + vb +
        " && ip link set " + va + " netns " + a_ + " && ip link set " + vb + " netns " + b_ + " && ip -n " + a_ +
        " addr add " + address_a_ + "/24 dev " + va + " && ip -n " + b_ + " addr add " + subnet + ".2/24 dev " + vb +
        " && ip -n " + a_ + " link set " + va + " up && ip -n " + b_ + " link set " + vb + " up && ip -n " + a_ +
        " link set lo up && ip -n " + b_ + " link set lo up && ip netns exec " + a_ + " tc qdisc add dev " + va +
        " root tbf rate " + rate + " burst 256kb latency 100ms && ip netns exec " + b_ + " tc qdisc add dev " + vb +
        " root tbf rate " + rate + " burst 256kb latency 100ms";
    ready_ = std::system(("(" + setup + ") >/dev/null 2>&1").c_str()) == 0;
    if (!ready_) remove();
  }
  ~ShapedLink() { remove(); }
  bool ready() const { return ready_; }
  const std::string& address_a() const { return address_a_; }
  // The namespace rank `rank` runs in: ranks 0, 1 in a, 2, 3 in b.
  const std::string& namespace_of(int64_t rank) const { return rank < kPerNode ? a_ : b_; }

 private:
  void remove() {
    std::system(("ip netns del " + a_ + " >/dev/null 2>&1; ip netns del " + b_ + " >/dev/null 2>&1").c_str());
  }
  std::string a_, b_, address_a_;
  bool ready_ = false;
};

}  // namespace

int main(int argc, char** argv) {
  return volt::run_main([&] {
    int64_t steps = 24, switch_steps = 4, batch = 32, localsgd_frequency = 3, slowmo_frequency = 12;
    double rate_mbit = 100;
    std::string widths = "256,512,256,10", configs = "ddp,none,post_local_sgd,slowmo";
    po::options_description flags("local_sgd_bench");
    flags.add_options()("help", "this text")("steps", po::value(&steps)->default_value(steps),
                                             "timed steps after the switch (whole periods of every row)")(
        "switch", po::value(&switch_steps)->default_value(4), "untimed steps first (start_local_sgd_iter)")(
        "widths", po::value(&widths)->default_value(widths), "MLP layer widths")(
        "batch", po::value(&batch)->default_value(32), "samples per rank per step")(
        "rate-mbit", po::value(&rate_mbit)->default_value(100), "the shaped link's rate in Mbit/s")(
        "no-veth", po::bool_switch(), "only the loopback")(
        "configs", po::value(&configs)->default_value(configs), "rows to run: ddp, none, post_local_sgd, slowmo")(
        "localsgd-frequency", po::value(&localsgd_frequency)->default_value(localsgd_frequency), "SlowMo's")(
        "slowmo-frequency", po::value(&slowmo_frequency)->default_value(slowmo_frequency), "SlowMo's")(
        "worker", po::value<std::vector<std::string>>()->multitoken(), "internal: run one rank");
    po::variables_map vm;
    po::store(po::parse_command_line(argc, argv, flags), vm);
    po::notify(vm);
    if (vm.count("help")) {
      std::cout << flags;
      return;
    }
    if (vm.count("worker")) {
      const auto& w = vm["worker"].as<std::vector<std::string>>();  // rank addr port hook switch steps widths batch
      std::exit(run_worker({std::stoll(w.at(0)), w.at(1), std::stoll(w.at(2)), w.at(3), std::stoll(w.at(4)),
                            std::stoll(w.at(5)), std::stoll(w.at(7)), w.at(6)}));
    }
    const auto wanted = [&](const std::string& name) {
      return ("," + configs + ",").find("," + name + ",") != std::string::npos;
    };
    volt::check<volt::ConfigurationError>(steps > 0 && (!wanted("post_local_sgd") || steps % 8 == 0),
                                          "local_sgd_bench: expected --steps a multiple of 8 (whole periods of 2, 4 "
                                          "and 8), got ", steps);
    volt::check<volt::ConfigurationError>(!wanted("slowmo") || steps % slowmo_frequency == 0, "local_sgd_bench: "
                                          "expected --steps a multiple of --slowmo-frequency ", slowmo_frequency,
                                          " (whole periods), got ", steps);
    char exe[4096];
    const ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    volt::check<volt::Error>(len > 0, "local_sgd_bench: cannot read /proc/self/exe");
    const std::string program(exe, static_cast<size_t>(len));

    struct Row {
      std::string label, hook;
    };
    const std::string start = std::to_string(switch_steps);
    std::vector<Row> rows;
    if (wanted("ddp")) rows.push_back({"DDP", "allreduce"});
    if (wanted("none")) rows.push_back({"no communication", "noop"});
    if (wanted("post_local_sgd")) {
      for (const int64_t period : {2, 4, 8}) {
        rows.push_back({"post-local-SGD, period " + std::to_string(period),
                        "post_local_sgd:start_local_sgd_iter=" + start + ",model_averaging_period=" +
                            std::to_string(period)});
      }
    }
    if (wanted("slowmo")) {
      const std::string frequencies = "localsgd_frequency=" + std::to_string(localsgd_frequency) +
                                      ",slowmo_frequency=" + std::to_string(slowmo_frequency);
      const std::string label = "SlowMo " + std::to_string(localsgd_frequency) + "/" + std::to_string(slowmo_frequency);
      rows.push_back({label + ", sharded", "slowmo:" + frequencies});
      rows.push_back({label + ", whole", "slowmo:memory_efficient=false," + frequencies});
    }
    const int64_t parameters = volt::bench::mlp_parameter_count(widths);
    std::printf("local SGD vs DDP: 2 nodes x 2 processes, MLP %s (%lld parameters, %.2f MB of float32 "
                "gradients), batch %lld per rank, SGD, 1 thread per rank; %lld untimed steps (DDP before "
                "post-local-SGD's switch), then %lld timed steps (mean). Bytes per step: payload over the world, "
                "the node leaders and the node (volt's counters, rank 0); link: bytes that crossed the shaped "
                "link (its interface counters, both directions, headers included)\n\n",
                widths.c_str(), static_cast<long long>(parameters), parameters * 4.0 / 1e6,
                static_cast<long long>(batch), static_cast<long long>(switch_steps), static_cast<long long>(steps));

    std::unique_ptr<ShapedLink> link;
    if (!vm["no-veth"].as<bool>()) {
      link = std::make_unique<ShapedLink>(rate_mbit);
      if (!link->ready()) {
        std::printf(
            "(no shaped link: creating network namespaces needs root and iproute2's ip and tc; loopback only)\n\n");
        link.reset();
      }
    }
    std::printf("| %-40s | %-26s | %9s | %12s | %12s | %12s | %12s | %9s | %10s |\n", "network", "configuration",
                "step ms", "world B/step", "leaders B/st", "node B/step", "link B/step", "time", "link bytes");
    std::printf("|%s|%s|%s|%s|%s|%s|%s|%s|%s|\n", std::string(42, '-').c_str(), std::string(28, '-').c_str(),
                std::string(11, '-').c_str(), std::string(14, '-').c_str(), std::string(14, '-').c_str(),
                std::string(14, '-').c_str(), std::string(14, '-').c_str(), std::string(11, '-').c_str(),
                std::string(12, '-').c_str());
    int64_t next_port = 29600 + getpid() % 300;  // inside the namespaces every port is free
    for (const bool shaped : {false, true}) {
      if (shaped && !link) continue;
      const std::string network = shaped ? "veth, " + std::to_string(static_cast<int64_t>(rate_mbit)) +
                                               " Mbit/s token bucket, 2 netns"
                                         : "loopback";
      double ddp_ms = 0, ddp_link = 0;
      for (const auto& row : rows) {
        const std::string port = std::to_string(shaped ? next_port++ : volt::find_free_port());
        std::vector<std::vector<std::string>> argvs;
        for (int64_t rank = 0; rank < kRanks; ++rank) {
          std::vector<std::string> argv;
          if (shaped) argv = {"ip", "netns", "exec", link->namespace_of(rank)};
          for (const auto& a : std::vector<std::string>{program, "--worker", std::to_string(rank),
                                                        shaped ? link->address_a() : "127.0.0.1", port, row.hook,
                                                        std::to_string(switch_steps), std::to_string(steps), widths,
                                                        std::to_string(batch)}) {
            argv.push_back(a);
          }
          argvs.push_back(argv);
        }
        const auto output = volt::bench::run_processes(argvs, {{"OMP_NUM_THREADS", "1"}, {"OPENBLAS_NUM_THREADS", "1"}},
                                                       "local_sgd_bench");
        const double ms = number_after(output, "step_ms"), link_bytes = number_after(output, "link_bytes");
        if (row.hook == "allreduce") {
          ddp_ms = ms;
          ddp_link = link_bytes;
        }
        const std::string link_text = shaped ? std::to_string(static_cast<int64_t>(link_bytes)) : "-";
        const std::string link_ratio =
            shaped && ddp_link > 0 ? std::to_string(link_bytes / ddp_link).substr(0, 5) + "x" : "-";
        std::printf("| %-40s | %-26s | %9.2f | %12.0f | %12.0f | %12.0f | %12s | %8.2fx | %10s |\n", network.c_str(),
                    row.label.c_str(), ms, number_after(output, "world_bytes"), number_after(output, "leaders_bytes"),
                    number_after(output, "node_bytes"), link_text.c_str(), ddp_ms > 0 ? ddp_ms / ms : 0.0,
                    link_ratio.c_str());
        std::fflush(stdout);
      }
    }
  });
}
