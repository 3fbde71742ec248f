// A program the multi-process tests start through every launcher (volt's, torchrun, mpirun,
// two "nodes"). It accepts every Trainer flag plus:
//   --mode collectives  join the group, check collectives against closed forms, print one
//                       "WORKER rank=.. world=.. local=../.. node=../.. env=.. sum=.." line
//   --mode fail         like collectives, then --fail-rank misbehaves (--how throw | exit |
//                       kill | stall | leave: returns, exit status 0) while the others keep
//                       reducing; they must fail fast
//   --mode train        Trainer.fit of a linear regression with the Trainer's own flags
//                       (--strategy test_grad_avg registers a plain gradient-averaging
//                       ParallelStrategy here, as a user would); prints "TRAINED rank=..
//                       params=.. log_dir=.." with the final parameters to 17 digits
//                       --optimizer sgd|momentum|adam picks the optimizer (Adam: state per
//                       rank); --print-steps prints "STEP rank=.. step=.. params=.." after every
//                       optimizer step; --print-initial prints "INITIAL params=.." with
//                       the parameters fit starts from (for references outside volt);
//                       --skip-every N makes training_step return no loss for
//                       batches N-1, 2N-1, ...; --model batch_norm puts a BatchNorm1d first
//                       (buffers), --model branch adds a layer used on batches 0, 3, 6, ... only,
//                       --model sparse_embedding an Embedding(sparse=true) (a sparse gradient),
//                       --model mlp_dropout the MLP with dropout on its inputs and body output;
//                       --print-buffers prints "BUFFERS rank=.. epoch=.. batch=.. values=.." with
//                       the module's buffers as each training_step starts (after the strategy's
//                       pre-forward work, e.g. DDP's broadcast_buffers);
//                       --checkpoint-every-epoch saves last.ckpt at every epoch end (in the
//                       background with --checkpoint-async); --save-after-batch K
//                       --save-after-batch-path P saves P after training batch K of epoch 0
//                       (inside an accumulation window when K ends none); --fail-write-rank R
//                       makes every checkpoint write of global rank R fail; with
//                       --crash-rank R --crash-epoch E rank R throws at the start of epoch E on
//                       the first attempt (TORCHELASTIC_RESTART_COUNT unset or 0), so that
//                       torchrun --max_restarts 1 ... --ckpt-path last resumes the group
//                       --stray-decision-rank R: rank R alone takes a broadcast_decision after
//                       its first training batch (a collective behind a rank-local condition);
//                       --inject-hang save_on_rank0|skip|sizes: a hang after training batch 1
//                       (worker_callbacks.h's InjectHang); --slow-rank R --slow-ms M: rank R
//                       sleeps M ms at every batch end (slow, no hang)
//   --mode sampler      fit over a dataset whose inputs are the sample indices (--samples, 10
//                       by default, batch 2, shuffled, seed 11); prints "SEEN rank=.. epoch=..
//                       indices=.." per epoch and "BATCH rank=.. epoch=.. step=.. batch=..
//                       indices=.." per training batch; --save-at-end PATH saves a checkpoint
//                       there after fit (with --max-steps: in the middle of an epoch)
//   --mode gan          README's GAN pattern (manual optimization, two Adam optimizers,
//                       toggle_model) on the regression samples; --print-steps' STEP lines always
// --report-signals (any mode): a process that SIGINT or SIGTERM ends prints "SIGNAL rank=..
// signal=.." first (and then ends by it). Rank 0's launcher replaces the handler with its own
// forwarding one, so it is the launched ranks that report what reached them.
// Exit status 0 only when every check held.
#include <signal.h>
#include <unistd.h>

#include <boost/program_options.hpp>

#include <cstdio>
#include <cstdlib>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <thread>

#include "callbacks/callback.h"
#include "core/error.h"
#include "core/reproducibility.h"
#include "distributed/cluster/cluster_environment.h"
#include "distributed/process_group_setup.h"
#include "distributed/process_launcher.h"
#include "strategies/parallel_strategy.h"
#include "strategies/strategy_registry.h"
#include "tests/distributed/worker/replica_strategy.h"
#include "tests/distributed/worker/worker_callbacks.h"
#include "tests/support/regression_problem.h"
#include "trainer/run_main.h"
#include "trainer/trainer_options.h"

namespace po = boost::program_options;
using namespace volt;
using namespace volt::worker;

namespace {

std::shared_ptr<ClusterEnvironment> cluster_of(const TrainerOptions& options) {
  return make_cluster_environment(options.cluster_environment, current_environment(), options.cluster_request());
}

// All-reduce of rank + 1, all_gather of ranks, a node-local sum: all closed forms.
void check_collectives(Communicator& c, const ClusterEnvironment& cluster) {
  const auto& t = cluster.topology();
  const int64_t n = c.size();
  auto sum = torch::tensor({static_cast<double>(c.rank() + 1)});
  c.all_reduce(sum);
  check<Error>(sum.item<double>() == static_cast<double>(n * (n + 1) / 2), "all_reduce: expected ", n * (n + 1) / 2,
               ", got ", sum.item<double>());
  const auto ranks = c.all_gather(torch::tensor({c.rank()}, torch::kLong)).flatten();
  check<Error>(torch::equal(ranks, torch::arange(n, torch::kLong)), "all_gather: expected 0..", n - 1, ", got ", ranks);
  auto groups = c.node_groups(t.node_rank);
  auto local = torch::tensor({1.0});
  groups.local->all_reduce(local);
  check<Error>(local.item<double>() == static_cast<double>(t.local_world_size), "node-local all_reduce: expected ",
               t.local_world_size, ", got ", local.item<double>());
  // One write per line, so that lines of several processes sharing a pipe never interleave.
  std::ostringstream line;
  line << "WORKER rank=" << c.rank() << " world=" << n << " local=" << t.local_rank << "/" << t.local_world_size
       << " node=" << t.node_rank << "/" << t.num_nodes << " env=" << cluster.name() << " sum=" << sum.item<double>()
       << " pid=" << getpid() << "\n";
  std::cout << line.str() << std::flush;
}

// Data parallelism in a dozen lines, registered like a user's own strategy: every optimizer step
// averages the gradients over the ranks first (no buckets, no overlap: DDP does that properly).
class GradientAveragingStrategy : public ParallelStrategy {
 public:
  std::string name() const override { return "test_grad_avg"; }
  // Accumulation micro-batches need no no_sync(): nothing is communicated before the step.
  bool optimizer_step(torch::optim::Optimizer& optimizer,
                      const std::function<void(torch::optim::Optimizer&)>& before_step) override {
    for (auto& group : optimizer.param_groups()) {
      for (auto& p : group.params()) {
        if (p.grad().defined()) communicator().all_reduce(p.mutable_grad(), ReduceOp::Mean);
      }
    }
    return ParallelStrategy::optimizer_step(optimizer, before_step);
  }
};

// `make_replica`: a new module like the one trained, for test_replicas (none: not registered).
void register_test_strategy(testing::ReplicaStrategy::ReplicaFactory make_replica = nullptr) {
  strategy_registry().add("test_grad_avg", "test-only: averages gradients before every step", {},
                          [](const OptionValues&) { return std::make_shared<GradientAveragingStrategy>(); });
  if (!make_replica) return;
  strategy_registry().add(
      "test_replicas", "test-only: every device of the node in one process, a replica each", {},
      [make_replica](const OptionValues&) { return std::make_shared<testing::ReplicaStrategy>(make_replica); });
}

// The regression module plus what the distributed tests read back: a per-step value synced
// across ranks (rank + 1: the mean over n ranks is (n + 1) / 2) and the number of validation
// samples summed over ranks (each sample must count exactly once).
class WorkerModule : public testing::RegressionModule {
 public:
  WorkerModule(testing::RegressionOptions options, bool print_buffers, int64_t manual_accumulate,
               bool module_no_sync = false)
      : RegressionModule(std::move(options)),
        print_buffers_(print_buffers),
        manual_accumulate_(manual_accumulate),
        module_no_sync_(module_no_sync) {}
  bool automatic_optimization() const override { return manual_accumulate_ == 0; }
  torch::Tensor training_step(const Batch& batch, int64_t batch_idx) override {
    if (print_buffers_) print_buffers(batch_idx);
    auto loss = RegressionModule::training_step(batch, batch_idx);
    if (manual_accumulate_ > 0 && loss.defined()) accumulate_by_hand(loss, batch_idx);
    const auto rank = static_cast<double>(trainer().strategy().topology().global_rank);
    log("rank_plus_one", torch::tensor(rank + 1.0), {.sync_dist = true});
    log("rank_plus_one_local", torch::tensor(rank + 1.0));
    return loss;
  }
  void validation_step(const Batch& batch, int64_t batch_idx) override {
    RegressionModule::validation_step(batch, batch_idx);
    log("val_samples", static_cast<double>(batch.size()), {.reduce_fx = ReduceFx::Sum, .sync_dist = true});
  }

 private:
  void print_buffers(int64_t batch_idx) const {
    std::ostringstream line;
    line << std::setprecision(17) << "BUFFERS rank=" << trainer().strategy().topology().global_rank
         << " epoch=" << current_epoch() << " batch=" << batch_idx << " values=";
    bool first = true;
    for (const auto& buffer : buffers()) {
      const auto flat = buffer.detach().to(torch::kDouble).flatten();
      for (int64_t i = 0; i < flat.numel(); ++i, first = false) line << (first ? "" : ",") << flat[i].item<double>();
    }
    line << "\n";
    std::cout << line.str() << std::flush;
  }

  // --manual-accumulate k: what --accumulate-grad-batches k does, written in training_step with
  // manual optimization (the window's last micro-batch, or the epoch's last batch, synchronizes
  // and steps). The other micro-batches skip synchronization in toggle_model(false), or with
  // --manual-no-sync in the module's own no_sync().
  void accumulate_by_hand(const torch::Tensor& loss, int64_t batch_idx) {
    const bool closes = (batch_idx + 1) % manual_accumulate_ == 0 || batch_idx + 1 == trainer().num_training_batches();
    auto& opt = optimizer();
    if (module_no_sync_) {
      auto scope = closes ? ScopeGuard() : no_sync();
      manual_backward(loss / static_cast<double>(manual_accumulate_));
    } else {
      auto scope = opt.toggle_model(/*sync_grad=*/closes);
      manual_backward(loss / static_cast<double>(manual_accumulate_));
    }
    if (closes) {
      opt.step();
      opt.zero_grad();
    }
  }

  bool print_buffers_;
  int64_t manual_accumulate_;
  bool module_no_sync_;
};

testing::RegressionOptions regression_options(const std::string& optimizer, int64_t skip_every,
                                              const std::string& model) {
  testing::RegressionOptions options;
  check<ConfigurationError>(model == "linear" || model == "batch_norm" || model == "branch" ||
                                model == "sparse_embedding" || model == "mlp" || model == "mlp_wrapped" || model == "mlp_dropout" ||
                                model == "wide_mlp" || model == "blocks" || model == "blocks_sharded" ||
                                model == "blocks_frozen" || model == "blocks_mixed" || model == "blocks_mixed_trained",
                            "worker: --model expects linear, batch_norm, branch, sparse_embedding, mlp, "
                            "mlp_wrapped, mlp_dropout, wide_mlp, blocks, blocks_sharded, blocks_frozen, blocks_mixed or "
                            "blocks_mixed_trained, got '",
                            model, "'");
  // Small enough that a STEP line (17 digits a parameter) stays below PIPE_BUF: the ranks' lines
  // reach the test whole, not interleaved.
  if (model == "mlp" || model == "mlp_wrapped" || model == "mlp_dropout") options.hidden = 4;
  // The MLP with dropout on its inputs and its body's output (RegressionOptions::body_dropout): the
  // randomness of the model-parallel oracles, whose ranks each draw from their own generator.
  if (model == "mlp_dropout") options.body_dropout = 0.2;
  // Units of a MiB (the body's second Linear, 512 x 512), for memory measured on a device, where
  // the caching allocator's 512-byte blocks would hide the small MLP's bytes. Not for --print-steps.
  if (model == "wide_mlp") options.hidden = 512;
  options.wrap_by_hand = model == "mlp_wrapped";
  // Two RegressionBlocks called through volt::call, with dropout: for the policies by type;
  // blocks_sharded: each marked by volt::fsdp::shard where the model builds it.
  // blocks_frozen: each block's weight frozen, its bias trained (frozen and trainable parameters in
  // one unit).
  // blocks_mixed: each block's weight bfloat16 and frozen, its bias float32 and trained (a LoRA
  // model's bfloat16 base); blocks_mixed_trained: the bfloat16 weights trained too (units of two
  // dtypes either way).
  if (model.rfind("blocks", 0) == 0) {
    options.blocks = 2;
    options.block_dropout = 0.2;
    options.shard_blocks = model == "blocks_sharded";
    options.freeze_block_weights = model == "blocks_frozen" || model == "blocks_mixed";
    if (model == "blocks_mixed" || model == "blocks_mixed_trained") options.block_weight_dtype = torch::kBFloat16;
  }
  options.batch_norm = model == "batch_norm";
  options.sparse_embedding = model == "sparse_embedding";
  if (model == "branch") options.use_branch = [](int64_t i) { return i % 3 == 0; };
  if (skip_every > 0) options.skip_batch = [skip_every](int64_t i) { return i % skip_every == skip_every - 1; };
  check<ConfigurationError>(optimizer == "sgd" || optimizer == "momentum" || optimizer == "adam",
                            "worker: --optimizer expects sgd, momentum or adam, got '", optimizer, "'");
  options.adam = optimizer == "adam";
  if (optimizer == "momentum") options.momentum = 0.9;
  if (options.adam) options.lr = 0.01;
  return options;
}

void train(const TrainerOptions& options, ProcessLauncher& launcher, int64_t batch_size,
           const std::vector<std::shared_ptr<Callback>>& extras, const testing::RegressionOptions& model_options,
           bool print_steps, bool print_buffers, int64_t manual_accumulate, bool module_no_sync,
           int64_t stray_decision_rank, bool print_initial, int64_t fail_write_rank, int64_t kill_rank,
           int64_t kill_batch) {
  register_test_strategy([&] { return std::make_shared<WorkerModule>(model_options, false, manual_accumulate); });
  TrainerComponents components;
  components.launcher = &launcher;  // run_main's launcher: the children's exit statuses count
  if (fail_write_rank >= 0) {
    components.strategy = create_strategy(options.strategy, options.devices * options.num_nodes, "worker");
    components.strategy->set_checkpoint_io(std::make_shared<FailingOnOneRankIO>(fail_write_rank));
  }
  Trainer trainer(options, components);
  for (const auto& extra : extras) trainer.add_callback(extra);
  if (stray_decision_rank >= 0) trainer.add_callback(std::make_shared<StrayDecision>(stray_decision_rank));
  if (kill_rank >= 0) trainer.add_callback(std::make_shared<KillAtBatch>(kill_rank, kill_batch));
  if (print_steps) trainer.add_callback(std::make_shared<StepPrinter>());
  // LibTorch seeds its default generator nondeterministically: seed before building the model,
  // so that the one-process reference starts from the same weights as the ranks.
  if (options.seed) seed_everything(*options.seed);
  auto module = std::make_shared<WorkerModule>(model_options, print_buffers, manual_accumulate, module_no_sync);
  if (print_initial) {  // every process builds the same weights from the seed
    std::ostringstream line;
    line << std::setprecision(17) << "INITIAL params=";
    const auto params = module->flat_parameters();
    for (int64_t i = 0; i < params.numel(); ++i) line << (i ? "," : "") << params[i].item<double>();
    line << "\n";
    std::cout << line.str() << std::flush;
  }
  trainer.fit(module, std::make_shared<testing::RegressionData>(64, batch_size, false, 7, 13));
  const auto params = testing::full_parameters(trainer.strategy(), *module);
  std::ostringstream text;
  text << std::setprecision(17);
  for (int64_t i = 0; i < params.numel(); ++i) text << (i ? "," : "") << params[i].item<double>();
  std::ostringstream line;
  line << "TRAINED rank=" << trainer.global_rank() << " params=" << text.str() << " val_samples="
       << (trainer.callback_metrics().count("val_samples") ? trainer.callback_metrics().at("val_samples") : -1.0)
       << " log_dir=" << trainer.log_dir() << " env=" << trainer.cluster_environment().name()
       << " restarts=" << trainer.cluster_environment().restart_count() << "\n";
  std::cout << line.str() << std::flush;
}

// README's GAN pattern (docs/training_loop.md#manual-optimization), issue 34.4: a generator and a
// discriminator, an Adam optimizer each, toggle_model() around each manual_backward. The noise of
// a sample is a function of the sample itself, so that every strategy and world size draws the
// same numbers for it. Small, so that a STEP line (93 parameters) stays below PIPE_BUF; under
// fsdp:min_num_params=10 the discriminator's last layer (5 parameters) is in the root unit.
class GanModule : public Module {
 public:
  GanModule()
      : gen(register_module(
            "gen", torch::nn::Sequential(torch::nn::Linear(2, 4), torch::nn::Tanh(), torch::nn::Linear(4, 8)))),
        disc(register_module(
            "disc", torch::nn::Sequential(torch::nn::Linear(8, 4), torch::nn::Tanh(), torch::nn::Linear(4, 1)))) {}
  bool automatic_optimization() const override { return false; }
  torch::Tensor training_step(const Batch& batch, int64_t) override {
    auto& g = optimizer(0);
    auto& d = optimizer(1);
    const auto real = batch.input;
    const auto noise = torch::sin(3.7 * real.narrow(1, 0, 2));
    {
      auto scope = g.toggle_model();  // disc's parameters stop requiring grad here
      const auto g_loss = torch::softplus(-disc->forward(gen->forward(noise))).mean();
      manual_backward(g_loss);
      log("g_loss", g_loss.detach());
    }
    g.step();
    g.zero_grad();
    {
      auto scope = d.toggle_model();
      const auto fake = gen->forward(noise).detach();
      const auto d_loss = torch::softplus(-disc->forward(real)).mean() + torch::softplus(disc->forward(fake)).mean();
      manual_backward(d_loss);
      log("d_loss", d_loss.detach());
    }
    d.step();
    d.zero_grad();
    return {};
  }
  OptimizerConfig configure_optimizers() override {
    return std::vector<std::shared_ptr<torch::optim::Optimizer>>{
        std::make_shared<torch::optim::Adam>(gen->parameters(), torch::optim::AdamOptions(1e-2)),
        std::make_shared<torch::optim::Adam>(disc->parameters(), torch::optim::AdamOptions(1e-2))};
  }

  torch::nn::Sequential gen, disc;
};

// --mode gan: GanModule on the regression samples, printing STEP lines after every batch.
void train_gan(const TrainerOptions& options, ProcessLauncher& launcher, int64_t batch_size) {
  Trainer trainer(options, launcher);
  trainer.add_callback(std::make_shared<StepPrinter>());
  if (options.seed) seed_everything(*options.seed);
  auto module = std::make_shared<GanModule>();
  trainer.fit(module, std::make_shared<testing::RegressionData>(64, batch_size, false, 7, 13));
}

// Records which sample indices this rank's training batches hold, per epoch.
class IndexRecorder : public Module {
 public:
  IndexRecorder() { weight = register_parameter("weight", torch::ones({1})); }
  torch::Tensor training_step(const Batch& batch, int64_t batch_idx) override {
    std::ostringstream line;
    line << "BATCH rank=" << global_rank() << " epoch=" << trainer().current_epoch()
         << " step=" << trainer().global_step() << " batch=" << batch_idx << " indices=";
    for (int64_t i = 0; i < batch.size(); ++i) {
      const auto index = static_cast<int64_t>(batch.input[i][0].item<double>());
      seen[trainer().current_epoch()].push_back(index);
      line << (i ? "," : "") << index;
    }
    line << " local_rank=" << local_rank() << " world_size=" << world_size();
    batches.push_back(line.str());
    return (weight * batch.input.sum()).sum();
  }
  OptimizerConfig configure_optimizers() override {
    return OptimizerConfig(std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(0.0)));
  }
  torch::Tensor weight;
  std::map<int64_t, std::vector<int64_t>> seen;
  std::vector<std::string> batches;
};

// The Trainer owns its launcher here (no launcher given), the other way a program can run.
void record_sampler(const TrainerOptions& options, int64_t samples, const std::string& save_at_end,
                    int64_t loader_workers) {
  register_test_strategy();
  Trainer trainer(options);
  auto module = std::make_shared<IndexRecorder>();
  auto indices = torch::arange(samples, torch::kFloat).unsqueeze(1);
  DataLoaderOptions loader;
  loader.batch_size = 2;
  loader.shuffle = true;
  loader.seed = 11;
  loader.num_workers = loader_workers;
  trainer.fit(module,
              std::make_shared<DataLoader>(std::make_shared<TensorDataset>(indices, torch::zeros({samples})), loader));
  if (!save_at_end.empty()) trainer.save_checkpoint(save_at_end);
  std::ostringstream lines;
  for (const auto& batch : module->batches) lines << batch << "\n";
  for (const auto& [epoch, seen] : module->seen) {
    lines << "SEEN rank=" << trainer.strategy().topology().global_rank << " epoch=" << epoch << " indices=";
    for (size_t i = 0; i < seen.size(); ++i) lines << (i ? "," : "") << seen[i];
    lines << "\n";
  }
  std::cout << lines.str() << std::flush;
}

// What the signal handler writes: formatted before any signal can arrive (async-signal-safe).
char g_signal_report[2][96];
size_t g_signal_report_length[2];

void report_signal_and_end(int signal_number) {
  const int which = signal_number == SIGINT ? 0 : 1;
  (void)!write(1, g_signal_report[which], g_signal_report_length[which]);
  signal(signal_number, SIG_DFL);
  raise(signal_number);
}

// --report-signals: installed before anything else runs.
void report_signals() {
  const char* rank = std::getenv("RANK");
  for (const int signal_number : {SIGINT, SIGTERM}) {
    const int which = signal_number == SIGINT ? 0 : 1;
    const int n = std::snprintf(g_signal_report[which], sizeof g_signal_report[which], "SIGNAL rank=%s signal=%d\n",
                                rank ? rank : "0", signal_number);
    g_signal_report_length[which] = static_cast<size_t>(n);
    struct sigaction action {};
    action.sa_handler = report_signal_and_end;
    sigemptyset(&action.sa_mask);
    sigaction(signal_number, &action, nullptr);
  }
}

void misbehave(const std::string& how) {
  std::cout << "WORKER failing rank misbehaves: " << how << std::endl;
  if (how == "throw") throw Error("worker: deliberate failure (--how throw)");
  if (how == "exit") _exit(3);
  if (how == "leave") return;  // the caller returns: the process ends normally, status 0
  if (how == "kill") raise(SIGKILL);
  if (how == "stall") {
    std::this_thread::sleep_for(std::chrono::seconds(600));
    return;
  }
  throw ConfigurationError("worker: --how expects throw, exit, kill, stall or leave, got '" + how + "'");
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--report-signals") report_signals();
  }
  return run_main([&](ProcessLauncher& launcher) {
    po::options_description own("distributed_worker");
    own.add_options()("mode", po::value<std::string>()->default_value("collectives"),
                      "collectives | fail | train | sampler | gan")(
        "fail-rank", po::value<int64_t>()->default_value(-1), "rank that misbehaves in --mode fail")(
        "how", po::value<std::string>()->default_value("throw"), "throw | exit | kill | stall | leave")(
        "batch-size", po::value<int64_t>()->default_value(8), "training batch size (--mode train)")(
        "samples", po::value<int64_t>()->default_value(10), "dataset size (--mode sampler)")(
        "save-at-end", po::value<std::string>()->default_value(""), "checkpoint written after fit (--mode sampler)")(
        "loader-workers", po::value<int64_t>()->default_value(0), "the loader's num_workers (--mode sampler)")(
        "checkpoint-every-epoch", po::bool_switch(), "save last.ckpt at every epoch end (--mode train)")(
        "checkpoint-async", po::bool_switch(), "with --checkpoint-every-epoch: write it in the background")(
        "save-after-batch", po::value<int64_t>()->default_value(-1),
        "K >= 0: save a checkpoint to --save-after-batch-path after training batch K of epoch 0 (--mode train)")(
        "save-after-batch-path", po::value<std::string>()->default_value(""), "where --save-after-batch saves")(
        "fail-write-rank", po::value<int64_t>()->default_value(-1),
        "R >= 0: every checkpoint write on global rank R fails (--mode train)")(
        "crash-rank", po::value<int64_t>()->default_value(-1), "rank that throws once (--mode train)")(
        "crash-epoch", po::value<int64_t>()->default_value(-1), "epoch at whose start it throws")(
        "kill-rank", po::value<int64_t>()->default_value(-1), "rank that kills itself (SIGKILL, --mode train)")(
        "kill-batch", po::value<int64_t>()->default_value(1), "first-epoch training batch at whose start it does")(
        "kill-at-steps", po::value<std::string>()->default_value(""),
        "S0,S1,...: --kill-rank dies at the first batch after S_a committed steps on attempt a (--mode train)")(
        "stray-decision-rank", po::value<int64_t>()->default_value(-1),
        "rank that alone takes a decision after its first batch (--mode train)")(
        "optimizer", po::value<std::string>()->default_value("sgd"), "sgd | momentum | adam (--mode train)")(
        "report-signals", po::bool_switch(), "print SIGNAL lines when SIGINT/SIGTERM end this process")(
        "print-steps", po::bool_switch(), "print the parameters after every optimizer step (--mode train)")(
        "print-initial", po::bool_switch(), "print the parameters fit starts from (--mode train)")(
        "print-buffers", po::bool_switch(), "print the buffers as every training_step starts (--mode train)")(
        "manual-accumulate", po::value<int64_t>()->default_value(0),
        "k > 0: manual optimization, accumulating k micro-batches by hand (--mode train)")(
        "manual-no-sync", po::bool_switch(),
        "with --manual-accumulate: skip synchronization in the module's no_sync(), not toggle_model(false)")(
        "model", po::value<std::string>()->default_value("linear"),
        "linear | batch_norm | branch | sparse_embedding | mlp | mlp_wrapped | mlp_dropout | wide_mlp | blocks | "
        "blocks_sharded | "
        "blocks_frozen | blocks_mixed | blocks_mixed_trained (--mode train)")(
        "inject-hang", po::value<std::string>()->default_value("none"),
        "none | save_on_rank0 | skip | sizes: a hang after training batch 1 (--mode train)")(
        "slow-rank", po::value<int64_t>()->default_value(-1), "rank that sleeps --slow-ms at every batch end")(
        "slow-ms", po::value<int64_t>()->default_value(0), "how long --slow-rank sleeps")(
        "skip-every", po::value<int64_t>()->default_value(0),
        "N > 0: training_step returns no loss for batches N-1, 2N-1, ... (--mode train)");
    po::variables_map vm;
    const auto options = TrainerOptions::from_args(argc, argv, own, &vm);
    const auto mode = vm["mode"].as<std::string>();
    if (mode == "train") {
      std::vector<std::shared_ptr<Callback>> extras{std::make_shared<CheckpointAndCrash>(
          vm["checkpoint-every-epoch"].as<bool>(), vm["checkpoint-async"].as<bool>(), vm["crash-rank"].as<int64_t>(),
          vm["crash-epoch"].as<int64_t>(), vm["save-after-batch-path"].as<std::string>(),
          vm["save-after-batch"].as<int64_t>())};
      if (!vm["kill-at-steps"].as<std::string>().empty()) {
        std::vector<int64_t> steps;
        std::stringstream list(vm["kill-at-steps"].as<std::string>());
        for (std::string step; std::getline(list, step, ',');) steps.push_back(std::stoll(step));
        extras.push_back(std::make_shared<KillAtSteps>(std::max<int64_t>(vm["kill-rank"].as<int64_t>(), 0), steps));
      }
      if (vm["inject-hang"].as<std::string>() != "none" || vm["slow-rank"].as<int64_t>() >= 0) {
        extras.push_back(std::make_shared<InjectHang>(vm["inject-hang"].as<std::string>(),
                                                      options.default_root_dir + "/injected.ckpt",
                                                      vm["slow-rank"].as<int64_t>(), vm["slow-ms"].as<int64_t>()));
      }
      return train(options, launcher, vm["batch-size"].as<int64_t>(), extras,
                   regression_options(vm["optimizer"].as<std::string>(), vm["skip-every"].as<int64_t>(),
                                      vm["model"].as<std::string>()),
                   vm["print-steps"].as<bool>(), vm["print-buffers"].as<bool>(), vm["manual-accumulate"].as<int64_t>(),
                   vm["manual-no-sync"].as<bool>(), vm["stray-decision-rank"].as<int64_t>(),
                   vm["print-initial"].as<bool>(), vm["fail-write-rank"].as<int64_t>(), vm["kill-rank"].as<int64_t>(),
                   vm["kill-batch"].as<int64_t>());
    }
    if (mode == "sampler") {
      return record_sampler(options, vm["samples"].as<int64_t>(), vm["save-at-end"].as<std::string>(),
                            vm["loader-workers"].as<int64_t>());
    }
    if (mode == "gan") return train_gan(options, launcher, vm["batch-size"].as<int64_t>());
    const auto cluster = cluster_of(options);
    auto communicator = start_process_group(*cluster, options.timeout, torch::kCPU, &launcher);
    check_collectives(*communicator, *cluster);
    if (mode == "collectives") return;
    check<ConfigurationError>(mode == "fail", "worker: --mode expects collectives, fail or train, got '", mode, "'");
    if (communicator->rank() == vm["fail-rank"].as<int64_t>()) {
      try {
        misbehave(vm["how"].as<std::string>());
      } catch (const std::exception& e) {
        communicator->report_failure(e.what());  // what ParallelStrategy::on_exception does
        throw;
      }
      if (vm["how"].as<std::string>() == "leave") return;  // closes its communicator, exits 0
    }
    auto t = torch::ones({1024});
    for (int step = 0; step < 1000000; ++step) {
      communicator->all_reduce(t);
      t.fill_(1.0);
    }
  });
}
