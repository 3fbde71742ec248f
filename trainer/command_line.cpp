// Binds TrainerOptions to command-line flags (Boost.Program_options). Names are Lightning's in
// dash form; a program may add its own flags beside volt's.
#include <boost/program_options.hpp>

#include <sstream>

#include "callbacks/callback_registry.h"
#include "loggers/logger_registry.h"
#include "strategies/strategy_registry.h"
#include "distributed/cluster/cluster_environment.h"
#include "precision/precision.h"
#include "core/option_spec.h"
#include "trainer/config_file.h"
#include "trainer/trainer_options.h"

namespace po = boost::program_options;

namespace volt {
namespace {

std::string joined(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : ", ") + item;
  return out;
}

// Flags that act on this command line itself and so are not options a config file sets.
po::options_description command_line_flags() {
  po::options_description flags("Command line");
  flags.add_options()
      ("help,h", "print this help and exit")
      ("list-strategies", "print the registered strategies with their options and exit")
      ("list-callbacks", "print the registered callbacks with their options and exit")
      ("list-loggers", "print the registered loggers with their options and exit")
      ("config", po::value<std::string>(),
       "read flags from this file of 'name = value' lines (see --print-config); flags given here win")
      ("print-config", "print the effective configuration in --config's format and exit");
  return flags;
}

po::options_description volt_flags(const TrainerOptions& d) {
  po::options_description flags("volt Trainer options");
  auto limit = [](const BatchLimit& l) { return po::value<std::string>()->default_value(l.to_string()); };
  flags.add_options()
      ("accelerator", po::value<std::string>()->default_value(d.accelerator), "cpu | cuda | auto")
      ("devices", po::value<int64_t>()->default_value(d.devices), "processes per node")
      ("malloc-tuning", po::value<bool>()->default_value(d.malloc_tuning),
       "keep freed memory in the heap (glibc) instead of re-faulting it every step")
      ("threads", po::value<int64_t>()->default_value(d.threads),
       "LibTorch intra-op threads per process (0: OMP_NUM_THREADS, else cores / processes per node)")
      ("blas-threads", po::value<int64_t>()->default_value(d.blas_threads),
       "OpenBLAS threads per process (0: OPENBLAS_NUM_THREADS, else 1: LibTorch's pool runs around BLAS)")
      ("num-nodes", po::value<int64_t>()->default_value(d.num_nodes), "number of nodes")
      ("strategy", po::value<std::string>()->default_value(d.strategy),
       "NAME[:key=value,...] (see --list-strategies)")
      ("precision", po::value<std::string>()->default_value(d.precision),
       ("one of: " + joined(precision_names())).c_str())
      ("cluster-environment", po::value<std::string>()->default_value(d.cluster_environment),
       ("who started the processes: " + joined(cluster_environment_names()) + " (auto: detected)").c_str())
      ("node-rank", po::value<int64_t>()->default_value(d.node_rank),
       "this machine's node with volt's launcher (-1: NODE_RANK or 0)")
      ("master-addr", po::value<std::string>()->default_value(d.master_addr),
       "rendezvous host (default: MASTER_ADDR, else 127.0.0.1 on one node)")
      ("master-port", po::value<int64_t>()->default_value(d.master_port),
       "rendezvous port (0: MASTER_PORT, else a free port on one node, 29500 on several)")
      ("timeout", po::value<double>()->default_value(static_cast<double>(d.timeout.count()) / 1000.0),
       "seconds any collective may take before the run fails")
      ("shared-memory-collectives", po::value<bool>()->default_value(d.shared_memory_collectives),
       "CPU collectives among the ranks of one host through shared memory, not Gloo's sockets "
       "(VOLT_SHM=0 turns it off too)")
      ("max-epochs", po::value<int64_t>(), "epochs to train (default 1000 unless --max-steps; -1: no limit)")
      ("min-epochs", po::value<int64_t>()->default_value(d.min_epochs),
       "epochs before early stopping or --max-time may stop")
      ("max-steps", po::value<int64_t>()->default_value(d.max_steps), "optimizer steps to train (-1: no limit)")
      ("max-time", po::value<std::string>()->default_value(d.max_time),
       "wall-clock limit DD:HH:MM:SS (once --min-epochs are done)")
      ("accumulate-grad-batches", po::value<int64_t>()->default_value(d.accumulate_grad_batches),
       "micro-batches per optimizer step")
      ("gradient-clip-val", po::value<double>(), "clip gradients at this value (default: no clipping)")
      ("cuda-graph", po::value<bool>()->default_value(d.cuda_graph)->implicit_value(true),
       "capture the training step in CUDA graphs and replay it (CUDA; single_device or ddp; volt::FusedAdamW)")
      ("gradient-clip-algorithm", po::value<std::string>()->default_value("norm"), "norm | value")
      ("val-check-interval", limit(d.val_check_interval), "fraction of an epoch, or batches, between validations")
      ("check-val-every-n-epoch", po::value<int64_t>()->default_value(d.check_val_every_n_epoch),
       "validate every n epochs")
      ("limit-train-batches", limit(d.limit_train_batches), "fraction or number of training batches per epoch")
      ("limit-val-batches", limit(d.limit_val_batches), "fraction or number of validation batches")
      ("limit-test-batches", limit(d.limit_test_batches), "fraction or number of test batches")
      ("limit-predict-batches", limit(d.limit_predict_batches), "fraction or number of predict batches")
      ("num-sanity-val-steps", po::value<int64_t>()->default_value(d.num_sanity_val_steps),
       "validation batches run before training (-1: all)")
      ("log-every-n-steps", po::value<int64_t>()->default_value(d.log_every_n_steps),
       "optimizer steps between logger writes")
      ("default-root-dir", po::value<std::string>()->default_value(d.default_root_dir),
       "root of logs and checkpoints")
      ("logger", po::value<std::vector<std::string>>()->multitoken(),
       "NAME[:key=value,...] (repeatable; 'none' for no logger; see --list-loggers; default csv)")
      ("callback", po::value<std::vector<std::string>>()->multitoken(),
       "NAME[:key=value,...] (repeatable; see --list-callbacks)")
      ("enable-checkpointing", po::value<bool>()->default_value(d.enable_checkpointing),
       "save checkpoints with a default ModelCheckpoint")
      ("ckpt-path", po::value<std::string>()->default_value(d.ckpt_path),
       "checkpoint to resume fit from: a file, or 'last' for the newest under --default-root-dir")
      ("enable-progress-bar", po::value<bool>()->default_value(d.enable_progress_bar), "show a progress bar")
      ("enable-model-summary", po::value<bool>()->default_value(d.enable_model_summary),
       "print a model summary at fit start")
      ("fast-dev-run", po::value<int64_t>()->default_value(d.fast_dev_run)->implicit_value(1),
       "run n batches of each loop once (no logging, no checkpoints)")
      ("overfit-batches", limit(d.overfit_batches), "train and validate on this fraction or number of batches")
      ("deterministic", po::value<bool>()->default_value(d.deterministic)->implicit_value(true),
       "use deterministic algorithms only")
      ("seed", po::value<uint64_t>(), "seed for torch and the samplers");
  return flags;
}

TrainerOptions options_from(const po::variables_map& vm) {
  TrainerOptions o;
  o.accelerator = vm["accelerator"].as<std::string>();
  o.devices = vm["devices"].as<int64_t>();
  o.malloc_tuning = vm["malloc-tuning"].as<bool>();
  o.threads = vm["threads"].as<int64_t>();
  o.blas_threads = vm["blas-threads"].as<int64_t>();
  o.num_nodes = vm["num-nodes"].as<int64_t>();
  o.strategy = vm["strategy"].as<std::string>();
  o.precision = vm["precision"].as<std::string>();
  o.cluster_environment = vm["cluster-environment"].as<std::string>();
  o.node_rank = vm["node-rank"].as<int64_t>();
  o.master_addr = vm["master-addr"].as<std::string>();
  o.master_port = vm["master-port"].as<int64_t>();
  const double timeout_s = vm["timeout"].as<double>();
  check<ConfigurationError>(timeout_s > 0 && timeout_s < 1e9, "--timeout: expected seconds > 0, got ", timeout_s);
  o.timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000.0 + 0.5));
  o.shared_memory_collectives = vm["shared-memory-collectives"].as<bool>();
  if (vm.count("max-epochs")) o.max_epochs = vm["max-epochs"].as<int64_t>();
  o.min_epochs = vm["min-epochs"].as<int64_t>();
  o.max_steps = vm["max-steps"].as<int64_t>();
  o.max_time = vm["max-time"].as<std::string>();
  o.accumulate_grad_batches = vm["accumulate-grad-batches"].as<int64_t>();
  if (vm.count("gradient-clip-val")) o.gradient_clip_val = vm["gradient-clip-val"].as<double>();
  o.cuda_graph = vm["cuda-graph"].as<bool>();
  const auto algorithm = vm["gradient-clip-algorithm"].as<std::string>();
  check<ConfigurationError>(algorithm == "norm" || algorithm == "value",
                            "--gradient-clip-algorithm: expected norm or value, got '", algorithm, "'");
  o.gradient_clip_algorithm = algorithm == "norm" ? GradientClipAlgorithm::Norm : GradientClipAlgorithm::Value;
  auto limit = [&](const char* flag) {
    return BatchLimit::parse(vm[flag].as<std::string>(), std::string("--") + flag);
  };
  o.val_check_interval = limit("val-check-interval");
  o.check_val_every_n_epoch = vm["check-val-every-n-epoch"].as<int64_t>();
  o.limit_train_batches = limit("limit-train-batches");
  o.limit_val_batches = limit("limit-val-batches");
  o.limit_test_batches = limit("limit-test-batches");
  o.limit_predict_batches = limit("limit-predict-batches");
  o.num_sanity_val_steps = vm["num-sanity-val-steps"].as<int64_t>();
  o.log_every_n_steps = vm["log-every-n-steps"].as<int64_t>();
  o.default_root_dir = vm["default-root-dir"].as<std::string>();
  if (vm.count("logger")) {
    o.loggers = vm["logger"].as<std::vector<std::string>>();
    if (o.loggers.size() == 1 && o.loggers[0] == "none") o.loggers.clear();
  }
  if (vm.count("callback")) o.callbacks = vm["callback"].as<std::vector<std::string>>();
  o.enable_checkpointing = vm["enable-checkpointing"].as<bool>();
  o.ckpt_path = vm["ckpt-path"].as<std::string>();
  o.enable_progress_bar = vm["enable-progress-bar"].as<bool>();
  o.enable_model_summary = vm["enable-model-summary"].as<bool>();
  o.fast_dev_run = vm["fast-dev-run"].as<int64_t>();
  o.overfit_batches = limit("overfit-batches");
  o.deterministic = vm["deterministic"].as<bool>();
  if (vm.count("seed")) o.seed = vm["seed"].as<uint64_t>();
  return o;
}

std::vector<std::string> long_names(const po::options_description& description) {
  std::vector<std::string> names;
  for (const auto& option : description.options()) names.push_back("--" + option->long_name());
  return names;
}

}  // namespace

TrainerOptions TrainerOptions::from_args(int argc, const char* const argv[]) {
  po::options_description none;
  return from_args(argc, argv, none, nullptr);
}

TrainerOptions TrainerOptions::from_args(int argc, const char* const argv[],
                                         const po::options_description& program_options,
                                         po::variables_map* program_values) {
  po::options_description configurable;  // what a --config file may set too
  if (!program_options.options().empty()) configurable.add(program_options);
  configurable.add(volt_flags(TrainerOptions{}));
  po::options_description all;
  all.add(configurable).add(command_line_flags());
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(argc, argv)
                      .options(all)
                      // No abbreviations: a typo such as --max-epoch must not pass for --max-epochs.
                      .style(po::command_line_style::default_style & ~po::command_line_style::allow_guessing)
                      .run(), vm);
    if (vm.count("config") && !vm.count("help")) store_config_file(vm["config"].as<std::string>(), configurable, vm);
    po::notify(vm);
  } catch (const po::unknown_option& e) {
    const auto suggestion = closest_match(e.get_option_name(), long_names(all));
    throw ConfigurationError("unknown flag '" + e.get_option_name() + "'" +
                             (suggestion.empty() ? "" : "; did you mean '" + suggestion + "'?") +
                             " Run with --help for every flag.");
  } catch (const po::too_many_positional_options_error&) {
    throw ConfigurationError("unexpected positional argument; flags take values as --flag VALUE, "
                             "and switches like --deterministic as --deterministic=false");
  } catch (const po::error& e) {
    throw ConfigurationError(std::string(e.what()) + ". Run with --help for every flag.");
  }
  if (vm.count("help")) {
    std::ostringstream text;
    text << "Usage: " << (argc > 0 ? argv[0] : "program") << " [options]\n" << all;
    throw HelpRequested(text.str());
  }
  if (vm.count("list-strategies")) throw HelpRequested(strategy_registry().describe());
  if (vm.count("list-callbacks")) throw HelpRequested(callback_registry().describe());
  if (vm.count("list-loggers")) throw HelpRequested(logger_registry().describe());
  if (program_values) *program_values = vm;
  auto options = options_from(vm);
  options.validate();
  // After validation, so that what is printed is a configuration that runs.
  if (vm.count("print-config")) throw HelpRequested(format_config(configurable, vm));
  return options;
}

}  // namespace volt
