// HYBRID_SHARD (Note [HYBRID_SHARD] in strategies/fsdp/fsdp_strategy.h) against FULL_SHARD on two
// hosts joined by one link: two network namespaces of this machine joined by a veth pair
// (bench/veth_link.h), shaped to --rate by a token bucket, 2 ranks per host (VOLT_HOST_ID tells
// volt they are different hosts, so nothing crosses through shared memory), volt's launcher on
// each host (--num-nodes 2). The model of fsdp_memory (20.0M parameters, 8 units), Adam, batch 16
// per rank, one thread per rank. Per step, over the timed steps, read on host 0:
//   link bytes  what crossed the link in both directions (the veth interface's kernel counters,
//               tx + rx, read by host 0's first rank before and after the timed steps);
//   peer bytes  HYBRID_SHARD's payload to the other host's peers (comm/peers/step_bytes, volt's
//               Communicator counters; FULL_SHARD has no such group);
//   ms/step     the median rank's median step.
// Needs root (ip netns, tc); without it the benchmark says why and stops.
//
//   build/bench/hsdp_link [--rate 1gbit] [--rounds 2] [--steps 4] [--warmup 2]
#include <boost/program_options.hpp>

#include <cstdio>
#include <fstream>

#include "bench/block_mlp.h"
#include "bench/ranked_runs.h"
#include "bench/run_ranks.h"
#include "bench/veth_link.h"
#include "distributed/network.h"
#include "trainer/run_main.h"

namespace {

constexpr int64_t kBatch = 16, kRanksPerHost = 2, kHosts = 2;

int64_t interface_bytes(const std::string& interface) {
  int64_t total = 0;
  for (const std::string direction : {"tx_bytes", "rx_bytes"}) {
    std::ifstream in("/sys/class/net/" + interface + "/statistics/" + direction);
    int64_t value = 0;
    in >> value;
    total += value;
  }
  return total;
}

// Times the steps and reads the link's counters around them (on host 0's first rank, which is in
// the namespace that holds one end of the link).
class LinkProbe : public volt::bench::RankReporter {
 public:
  LinkProbe(int warmup, std::string interface)
      : RankReporter(warmup), warmup_(warmup), interface_(std::move(interface)) {}

  // Host 0's ranks report (the parent reads host 0's output); host 1's would print to the terminal.
  void on_train_end(volt::Trainer& trainer, volt::Module& module) override {
    if (trainer.node_rank() == 0) RankReporter::on_train_end(trainer, module);
  }

  void on_train_batch_end(volt::Trainer& trainer, volt::Module& module, const torch::Tensor& loss,
                          const volt::Batch& batch, int64_t batch_idx) override {
    RankReporter::on_train_batch_end(trainer, module, loss, batch, batch_idx);
    const auto bytes = interface_bytes(interface_);
    if (++batches_ == warmup_) first_ = bytes;
    if (batches_ > warmup_) last_ = bytes, timed_ = batches_ - warmup_;
    const auto metrics = trainer.strategy().metrics();
    if (auto it = metrics.find("comm/peers/step_bytes"); it != metrics.end())
      peer_bytes_ = static_cast<int64_t>(it->second);
  }

 protected:
  std::vector<std::pair<std::string, int64_t>> memory(volt::Trainer&, volt::Module&) override {
    return {{"link_bytes", timed_ > 0 ? (last_ - first_) / timed_ : 0}, {"peer_bytes", peer_bytes_}};
  }

 private:
  int warmup_;
  std::string interface_;
  int batches_ = 0, timed_ = 0;
  int64_t first_ = 0, last_ = 0, peer_bytes_ = 0;
};

struct HostFlags {
  std::string strategy, master, interface;
  int64_t node_rank = 0, port = 0;
  int steps = 4, warmup = 2;
};

// One host's launcher: 2 ranks of a 4-rank run on 2 nodes.
void run_host(volt::ProcessLauncher& launcher, const HostFlags& host) {
  volt::bench::RankedFlags flags;
  flags.worker_strategy = host.strategy;
  flags.worker_ranks = kRanksPerHost;
  flags.steps = host.steps;
  flags.warmup = host.warmup;
  auto options = volt::bench::worker_trainer_options(flags, "/tmp/volt_hsdp_link");
  options.threads = 1;
  options.num_nodes = kHosts;
  options.node_rank = host.node_rank;
  options.master_addr = host.master;
  options.master_port = host.port;
  volt::Trainer trainer(options, launcher);
  trainer.add_callback(std::make_shared<LinkProbe>(host.warmup, host.interface));
  torch::manual_seed(0);
  auto module = std::make_shared<volt::bench::BlockMlp>();
  const int64_t samples = kHosts * kRanksPerHost * kBatch * (host.steps + host.warmup);
  const int64_t width = volt::bench::kBlockWidth;
  auto data = std::make_shared<volt::TensorDataset>(torch::randn({samples, width}), torch::randn({samples, width}));
  volt::DataLoaderOptions loader;
  loader.batch_size = kBatch;
  trainer.fit(module, std::make_shared<volt::DataLoader>(data, loader));
}

// One run of `strategy` on both hosts; host 0's ranks' report.
volt::bench::RankReport run_both(const std::string& program, const std::string& strategy, const HostFlags& base,
                                 const volt::bench::VethLink& link) {
  const auto port = volt::find_free_port();
  std::vector<std::vector<std::string>> argv(kHosts);
  std::vector<std::map<std::string, std::string>> env(kHosts);
  for (int h = 0; h < kHosts; ++h) {
    argv[h] = link.exec_prefix(h);
    argv[h].insert(argv[h].end(),
                   {program, "--host", strategy, "--node-rank", std::to_string(h), "--master", link.address(0),
                    "--port", std::to_string(port), "--interface", link.interface(h), "--steps",
                    std::to_string(base.steps), "--warmup", std::to_string(base.warmup)});
    env[h] = {{"VOLT_HOST_ID", "hsdp-link-host-" + std::to_string(h)},
              {"GLOO_SOCKET_IFNAME", link.interface(h)},
              {"OMP_NUM_THREADS", "1"},
              {"GLIBC_TUNABLES", volt::bench::kTrainerMallocTunables}};
  }
  const auto result = volt::bench::run_ranks(argv, env, std::chrono::minutes(10));
  volt::check<volt::Error>(result.ok(), "hsdp_link: ", strategy, ": ", result.describe(), "\n", result.output);
  return volt::bench::parse_rank_report(result.output, kRanksPerHost, "hsdp_link");
}

}  // namespace

int main(int argc, char** argv) {
  return volt::run_main([&](volt::ProcessLauncher& launcher) {
    namespace po = boost::program_options;
    HostFlags host;
    std::string rate = "1gbit";
    int rounds = 2;
    po::options_description description("hsdp_link");
    description.add_options()("help", "this text")("rate", po::value(&rate)->default_value(rate),
                                                   "the link's rate (tc's units: 1gbit, 100mbit)")(
        "rounds", po::value(&rounds)->default_value(rounds), "interleaved rounds")(
        "steps", po::value(&host.steps)->default_value(host.steps), "timed steps per run")(
        "warmup", po::value(&host.warmup)->default_value(host.warmup), "untimed steps per run")(
        "host", po::value(&host.strategy), "internal: run one host's ranks of this strategy")(
        "node-rank", po::value(&host.node_rank), "internal")("master", po::value(&host.master), "internal")(
        "port", po::value(&host.port), "internal")("interface", po::value(&host.interface), "internal");
    if (!volt::bench::parse_flags(argc, argv, description)) return;
    if (!host.strategy.empty()) {
      run_host(launcher, host);
      return;
    }
    volt::bench::VethLink link;
    if (!link.ok()) {
      std::printf("hsdp_link: no network namespaces here (it needs root): %s\n", link.error().c_str());
      return;
    }
    const auto failure = link.set_rate(rate);
    volt::check<volt::Error>(failure.empty(), "hsdp_link: tc failed: ", failure);
    const std::string program = volt::bench::self_path("hsdp_link");
    const std::vector<std::string> strategies{"fsdp:min_num_params=1e6",
                                              "fsdp:min_num_params=1e6,sharding_strategy=HYBRID_SHARD"};
    std::map<std::string, std::vector<double>> ms;
    std::map<std::string, volt::bench::RankReport> last;
    for (int round = 0; round < rounds; ++round) {
      for (const auto& strategy : strategies) {
        last[strategy] = run_both(program, strategy, host, link);
        ms[strategy].push_back(last[strategy].at("step_ms"));
      }
    }
    std::printf("HYBRID_SHARD vs FULL_SHARD, 2 hosts x 2 ranks joined by a veth link shaped to %s, the 20.0M-parameter "
                "MLP of 8 units, Adam, batch %lld per rank, 1 thread per rank, %d rounds interleaved, %d timed steps "
                "(+%d warm-up). Per step: MB that crossed the link (both directions, the interface's counters), MB "
                "to the peers (volt's counters), median ms.\n\n"
                "| strategy | link MB/step | vs FULL_SHARD | peer MB/step | ms/step | vs FULL_SHARD |\n"
                "|---|---|---|---|---|---|\n",
                rate.c_str(), static_cast<long long>(kBatch), rounds, host.steps, host.warmup);
    const auto& full = last.at(strategies.front());
    const double full_ms = volt::bench::median(ms.at(strategies.front()));
    for (const auto& strategy : strategies) {
      const auto& r = last.at(strategy);
      const double step_ms = volt::bench::median(ms.at(strategy));
      std::printf("| %s | %.1f | %.3fx | %.1f | %.0f | %.2fx |\n", strategy.c_str(), r.at("link_bytes") / 1e6,
                  r.at("link_bytes") / full.at("link_bytes"), r.at("peer_bytes") / 1e6, step_ms, step_ms / full_ms);
    }
  });
}
