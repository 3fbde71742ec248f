// Memory of fsdp's checkpoints per rank. Saving: an fsdp run on 2 ranks saves a sharded and a full
// checkpoint (and one on the largest N' a full one): what rank 0 and the other ranks hold at the
// save's peak (a full save gathers to rank 0 alone: Note [A full save gathers to rank 0]), beside
// gathering the parameters on every rank. Loading: fsdp on N' ranks resumes from the sharded
// checkpoint (each rank reads the slices it owns: Note [Loading a slice]; on 2 ranks its own
// shard), from it through a CheckpointIO subclass that overrides load() alone (each shard read
// whole), and, as the baseline, from the same state as one full checkpoint file (every rank reads
// the whole file), measured in the same run; and the full checkpoint put together in one process
// (what every rank of a strategy that keeps whole tensors does). Model: a ~20M-parameter MLP of 8 equal blocks (Linear
// 1580x1580, one fsdp unit each by min_num_params=1e6), Adam after 2 steps; Gloo on 127.0.0.1, one compute thread per
// rank.
//
// Counted from live CPU tensors (a counting allocator, bench/counting_allocator.h), per rank, each
// column's largest rank shown:
//   held      the rank's model state after the load: its flat shards and their Adam state (what
//             (model + optimizer state) / N' is in fact on that rank, padding included);
//   load peak the most bytes of live tensors during the load, less those live before it that are
//             not the rank's shards (data, buffers): the rank's shards plus what the load holds
//             at its peak;
//   goal      issue 35's bound: held + the largest unit (its parameters and their Adam state).
// Also per run: the bytes each rank read from the checkpoint's files (verification blocks
// included) and the wall time of the load.
//
//   build/bench/reshard_memory [--ranks 2,3,4]
#include <cstdio>

#include "bench/block_mlp.h"
#include "bench/counting_allocator.h"
#include "bench/ranked_runs.h"
#include "checkpoint/sharded_checkpoint.h"
#include "strategies/checkpoint_state.h"
#include "strategies/strategy_registry.h"
#include "trainer/run_main.h"

namespace {

using volt::bench::CountingCPUAllocator;
using volt::bench::mib;
using volt::bench::storage_bytes;

using volt::bench::kBlocks;
constexpr int64_t kWidth = volt::bench::kBlockWidth, kBatch = 16, kSavedRanks = 2, kSteps = 2;
constexpr const char* kStrategy = "fsdp:min_num_params=1e6";

// The benchmarks' model, marking where a resume's load starts.
class BlockMlp : public volt::bench::BlockMlp {
 public:
  volt::OptimizerConfig configure_optimizers() override {
    // The last allocation before a resume's load: the peak is counted from here.
    auto& counter = CountingCPUAllocator::install();
    counter.reset_peak();
    live_before_load = counter.live();
    read_before_load = volt::CheckpointFileReader::bytes_read_in_process();
    load_start = std::chrono::steady_clock::now();
    return volt::bench::BlockMlp::configure_optimizers();
  }
  std::chrono::steady_clock::time_point load_start;
  int64_t live_before_load = 0;
  uint64_t read_before_load = 0;
};

// The save workers write their checkpoint at the end of training and report what the save held
// at its peak above what was live before it: global rank 0 (which writes a full checkpoint) and
// the other ranks apart. Then, as the baseline, what gathering the whole model on every rank holds
// (CheckpointState::full_model_state_dict: the module's parameters alone, without the optimizer
// state a full save also gathers).
class SaveAtEnd : public volt::Callback {
 public:
  explicit SaveAtEnd(std::string path) : path_(std::move(path)) {}
  void on_train_end(volt::Trainer& trainer, volt::Module& module) override {
    auto& counter = CountingCPUAllocator::install();
    counter.reset_peak();
    int64_t before = counter.live();
    trainer.save_checkpoint(path_);
    const int64_t save_peak = counter.peak() - before;
    counter.reset_peak();
    before = counter.live();
    { const auto whole = trainer.strategy().checkpointing().full_model_state_dict(module); }
    const int64_t gather_peak = counter.peak() - before;
    const int64_t rank = trainer.global_rank();
    std::printf("RANK %lld step_ms 0 root_save_peak %lld other_save_peak %lld all_gather_peak %lld\n",
                static_cast<long long>(rank), static_cast<long long>(rank == 0 ? save_peak : 0),
                static_cast<long long>(rank == 0 ? 0 : save_peak), static_cast<long long>(gather_peak));
    std::fflush(stdout);
  }

 private:
  std::string path_;
};

// A CheckpointIO that overrides load() alone (as one storing elsewhere would): the sharded loader
// gets each shard whole from it (Note [Reading a sharded checkpoint anywhere]).
class LoadOnlyCheckpointIO : public volt::CheckpointIO {
 public:
  volt::StateDict load(const std::filesystem::path& path) override { return volt::CheckpointIO::load(path); }
};

// The load worker reports right after the load (on_fit_start follows the restore).
class LoadProbe : public volt::Callback {
 public:
  void on_fit_start(volt::Trainer& trainer, volt::Module& module) override {
    auto& counter = CountingCPUAllocator::install();
    const auto& mlp = static_cast<const BlockMlp&>(module);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - mlp.load_start).count();
    auto& optimizer = *trainer.optimizers().at(0);
    std::vector<torch::Tensor> shards;
    for (auto& group : optimizer.param_groups()) {
      for (auto& p : group.params()) shards.push_back(p);
    }
    const int64_t params = storage_bytes(shards);
    const int64_t state = volt::bench::RankReporter::adam_state_bytes(optimizer);
    // What was live before the load and is not the rank's parameter shards (data, buffers) does
    // not count against the load.
    const int64_t load_peak = counter.peak() - (mlp.live_before_load - params);
    std::printf("RANK %lld step_ms 0 held %lld load_peak %lld read %lld seconds %.3f\n",
                static_cast<long long>(trainer.strategy().topology().global_rank),
                static_cast<long long>(params + state), static_cast<long long>(load_peak),
                static_cast<long long>(volt::CheckpointFileReader::bytes_read_in_process() - mlp.read_before_load),
                seconds);
    std::fflush(stdout);
  }
};

struct Flags {
  std::string ranks = "2,3,4";
  std::string worker;  // "save_sharded" | "save_full" | "load" | "load_through_subclass"
  int64_t worker_ranks = 0;
  std::string path;
};

volt::TrainerOptions trainer_options(const Flags& flags, const std::string& strategy) {
  volt::TrainerOptions options;
  options.strategy = strategy;
  options.devices = flags.worker_ranks;
  options.accelerator = "cpu";
  options.max_steps = kSteps;  // a resume starts at step kSteps: it loads and trains nothing
  options.loggers.clear();
  options.enable_checkpointing = false;
  options.enable_progress_bar = false;
  options.enable_model_summary = false;
  options.num_sanity_val_steps = 0;
  options.default_root_dir = "/tmp/volt_reshard_memory/root";
  options.threads = 1;
  return options;
}

void run_worker(volt::ProcessLauncher& launcher, const Flags& flags) {
  const bool save = flags.worker == "save_sharded" || flags.worker == "save_full";
  const std::string strategy =
      flags.worker == "save_sharded" ? std::string(kStrategy) + ",state_dict_type=sharded" : std::string(kStrategy);
  const auto options = trainer_options(flags, strategy);
  volt::TrainerComponents components;
  components.launcher = &launcher;
  if (flags.worker == "load_through_subclass") {
    components.strategy = volt::create_strategy(strategy, flags.worker_ranks, "reshard_memory");
    components.strategy->set_checkpoint_io(std::make_shared<LoadOnlyCheckpointIO>());
  }
  volt::Trainer trainer(options, components);
  torch::manual_seed(0);
  auto module = std::make_shared<BlockMlp>();
  const int64_t samples = flags.worker_ranks * kBatch * kSteps;
  auto data = std::make_shared<volt::TensorDataset>(torch::randn({samples, kWidth}), torch::randn({samples, kWidth}));
  volt::DataLoaderOptions loader;
  loader.batch_size = kBatch;
  if (save) {
    trainer.add_callback(std::make_shared<SaveAtEnd>(flags.path));
    trainer.fit(module, std::make_shared<volt::DataLoader>(data, loader));
    return;
  }
  trainer.add_callback(std::make_shared<LoadProbe>());
  trainer.fit(module, std::make_shared<volt::DataLoader>(data, loader), nullptr, flags.path);
}

}  // namespace

int main(int argc, char** argv) {
  CountingCPUAllocator::install();
  return volt::run_main([&](volt::ProcessLauncher& launcher) {
    namespace po = boost::program_options;
    Flags flags;
    po::options_description description("reshard_memory");
    description.add_options()("help", "this text")("ranks", po::value(&flags.ranks)->default_value(flags.ranks),
                                                   "world sizes that load, comma-separated")(
        "worker", po::value(&flags.worker), "internal: save_sharded | save_full | load | load_through_subclass")(
        "worker-ranks", po::value(&flags.worker_ranks), "internal: on this many ranks")(
        "path", po::value(&flags.path), "internal: the checkpoint");
    if (!volt::bench::parse_flags(argc, argv, description)) return;
    if (!flags.worker.empty()) {
      run_worker(launcher, flags);
      return;
    }
    const std::string program = volt::bench::self_path("reshard_memory");
    const std::filesystem::path root = "/tmp/volt_reshard_memory";
    std::filesystem::remove_all(root);
    std::filesystem::create_directories(root);
    const auto sharded = root / "sharded", full = root / "full.ckpt";
    // The saves: each layout on kSavedRanks ranks (the sharded one is the checkpoint the loads
    // read) and the full layout on the largest number of ranks that load.
    std::vector<int64_t> rank_counts;
    std::stringstream ranks_text(flags.ranks);
    for (std::string item; std::getline(ranks_text, item, ',');) rank_counts.push_back(std::stoll(item));
    struct Save {
      std::string layout;
      int64_t ranks;
      volt::bench::RankReport report;
    };
    std::vector<Save> saves = {{"sharded", kSavedRanks, {}}, {"full", kSavedRanks, {}}};
    const int64_t most = *std::max_element(rank_counts.begin(), rank_counts.end());
    if (most != kSavedRanks) saves.push_back({"full", most, {}});
    for (auto& save : saves) {
      const auto path = save.layout == "sharded" ? sharded : root / ("full_" + std::to_string(save.ranks) + ".ckpt");
      const auto output = volt::bench::run_shell(program + " --worker save_" + save.layout + " --worker-ranks " +
                                                     std::to_string(save.ranks) + " --path " + path.string(),
                                                 "reshard_memory save");
      save.report = volt::bench::parse_rank_report(output, save.ranks, "reshard_memory save");
    }

    // The baseline's file, and what putting it together costs one process.
    auto& counter = CountingCPUAllocator::install();
    counter.reset_peak();
    const int64_t before = counter.live();
    volt::CheckpointIO io;
    {
      const auto assembled = volt::assemble_full_checkpoint(io, sharded);
      io.save(assembled, full);
    }
    const double put_together = static_cast<double>(counter.peak() - before);

    const double unit_params = static_cast<double>(kWidth * kWidth + kWidth) * 4;
    const double unit = unit_params * 3;  // its parameters and Adam's exp_avg and exp_avg_sq
    std::printf("Loading a checkpoint of fsdp on %lld ranks with fsdp on N' ranks: %lld-parameter MLP of %lld blocks "
                "(Linear %lldx%lld, one unit each), Adam state after %lld steps.\n"
                "MiB per rank (the largest rank), counted from live CPU tensors. The whole model with its Adam state "
                "is %.1f MiB; putting the full checkpoint together in one process peaks at %.1f MiB.\n\n",
                static_cast<long long>(kSavedRanks), static_cast<long long>(kBlocks * (kWidth * kWidth + kWidth)),
                static_cast<long long>(kBlocks), static_cast<long long>(kWidth), static_cast<long long>(kWidth),
                static_cast<long long>(kSteps), mib(unit * kBlocks), mib(put_together));
    std::printf("Saving at the end of training: MiB a save holds at its peak above what was live before it, on "
                "global rank 0 (which writes a full checkpoint into one file) and on the largest other rank; "
                "beside it, the baseline: gathering the module's parameters whole on every rank "
                "(full_model_state_dict, no optimizer state).\n\n"
                "| ranks | layout | save peak, rank 0 | save peak, other ranks | parameters gathered on every rank |\n"
                "|---|---|---|---|---|\n");
    for (const auto& save : saves) {
      std::printf("| %lld | %s | %.1f | %.1f | %.1f |\n", static_cast<long long>(save.ranks), save.layout.c_str(),
                  mib(save.report.at("root_save_peak")), mib(save.report.at("other_save_peak")),
                  mib(save.report.at("all_gather_peak")));
    }
    std::printf("\nLoading (the sharded checkpoint of %lld ranks; on %lld ranks fsdp reads its own shard):\n\n",
                static_cast<long long>(kSavedRanks), static_cast<long long>(kSavedRanks));
    std::printf("| N' | loads | held | load peak | goal: held + a unit | read from files | load s |\n"
                "|---|---|---|---|---|---|---|\n");
    struct Load {
      std::string name, worker;
      std::filesystem::path path;
    };
    const std::vector<Load> loads = {
        {"sharded checkpoint", "load", sharded},
        {"sharded, CheckpointIO subclass with load() only", "load_through_subclass", sharded},
        {"full checkpoint file", "load", full}};
    for (const int64_t ranks : rank_counts) {
      for (const auto& [name, worker, path] : loads) {
        const auto output = volt::bench::run_shell(program + " --worker " + worker + " --worker-ranks " +
                                                       std::to_string(ranks) + " --path " + path.string(),
                                                   "reshard_memory load");
        const auto m = volt::bench::parse_rank_report(output, ranks, "reshard_memory");
        const double load_peak = m.at("load_peak");
        const double goal = m.at("held") + unit;
        std::printf(
            "| %lld | %s | %.1f | %.1f | %s %.1f | %s | %.2f |\n", static_cast<long long>(ranks), name.c_str(),
            mib(m.at("held")), mib(load_peak), load_peak <= goal ? "<=" : ">", mib(goal),
            m.at("read") > 0 ? (std::to_string(static_cast<int>(mib(m.at("read")))) + " MiB").c_str() : "whole file",
            m.at("seconds"));
      }
      std::fflush(stdout);
    }
  });
}
