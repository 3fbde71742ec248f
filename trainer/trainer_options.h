#pragma once
// Everything a Trainer can be told, with Lightning's names and defaults. Each field is also a
// command-line flag in dash form (max_epochs → --max-epochs); `--help` lists them with defaults.
#include <chrono>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/duration.h"  // parse_duration
#include "trainer/batch_limit.h"
#include "core/error.h"

namespace boost::program_options {
class options_description;
class variables_map;
}  // namespace boost::program_options

namespace volt {

struct ClusterRequest;

enum class GradientClipAlgorithm { Norm, Value };

struct TrainerOptions {
  // ---- hardware and distribution
  std::string accelerator = "auto";   // cpu | cuda | auto (cuda when LibTorch sees a GPU)
  int64_t devices = 1;                // processes per node; >= 1
  int64_t num_nodes = 1;              // >= 1
  std::string strategy = "auto";      // NAME[:key=value,...], a registered strategy (--list-strategies)
  std::string precision = "32-true";  // see precision_names()
  bool malloc_tuning = true;          // keep freed memory in the heap (glibc); see malloc_tuning.h
  // CPU threads per process (core/cpu_threads.h): LibTorch's intra-op pool gets the core share,
  // OpenBLAS one thread inside it. 0: automatic (OMP_NUM_THREADS / OPENBLAS_NUM_THREADS win).
  int64_t threads = 0;                // intra-op threads; >= 0
  int64_t blas_threads = 0;           // OpenBLAS threads; >= 0
  // Several processes (docs/launching.md): who starts them and where they meet.
  std::string cluster_environment = "auto";  // auto | torchelastic | slurm | mpi | volt
  int64_t node_rank = -1;             // this machine's node with volt's launcher; -1: NODE_RANK or 0
  std::string master_addr;            // rendezvous host; "": MASTER_ADDR, else 127.0.0.1 on one node
  int64_t master_port = 0;            // rendezvous port; 0: MASTER_PORT, else free (one node) or 29500
  std::chrono::milliseconds timeout{std::chrono::minutes(30)};  // bound on every collective; > 0
  // CPU collectives among ranks of one host through shared memory instead of Gloo's sockets
  // (Note [Collectives through shared memory]); VOLT_SHM=0 in the environment turns it off too.
  bool shared_memory_collectives = true;

  // ---- how long
  std::optional<int64_t> max_epochs;  // unset: 1000 unless max_steps is set; -1: no limit
  // should_stop and max_time end the fit only after this many epochs (Lightning's rule);
  // max_steps and max_epochs end it regardless.
  int64_t min_epochs = 0;
  int64_t max_steps = -1;             // optimizer steps (accumulation windows); -1: no limit
  std::string max_time;               // training time limit "DD:HH:MM:SS" (from fit start); empty: none

  // ---- optimization
  int64_t accumulate_grad_batches = 1;             // micro-batches per optimizer step; >= 1
  std::optional<double> gradient_clip_val;         // unset: no clipping; > 0
  GradientClipAlgorithm gradient_clip_algorithm = GradientClipAlgorithm::Norm;
  // Capture the training step in CUDA graphs and replay it (docs/training_loop.md#captured-steps):
  // CUDA only, single_device or ddp, optimizers that are volt::FusedAdamW.
  bool cuda_graph = false;

  // ---- evaluation
  BatchLimit val_check_interval = BatchLimit::fraction(1.0);  // fraction of an epoch or batches
  int64_t check_val_every_n_epoch = 1;                        // >= 1
  BatchLimit limit_train_batches = BatchLimit::fraction(1.0);
  BatchLimit limit_val_batches = BatchLimit::fraction(1.0);
  BatchLimit limit_test_batches = BatchLimit::fraction(1.0);
  BatchLimit limit_predict_batches = BatchLimit::fraction(1.0);
  int64_t num_sanity_val_steps = 2;   // validation batches before training; -1: all

  // ---- logging and output
  int64_t log_every_n_steps = 50;     // optimizer steps between logger writes; >= 1
  std::string default_root_dir = ".";
  std::vector<std::string> loggers{"csv"};  // registered loggers NAME[:k=v,...]; empty: none
  std::vector<std::string> callbacks;       // registered callbacks NAME[:k=v,...]
  bool enable_checkpointing = true;   // a ModelCheckpoint unless one is configured
  bool enable_progress_bar = true;
  bool enable_model_summary = true;
  std::string ckpt_path;              // fit resumes from this checkpoint ("last": the newest); empty: none

  // ---- debugging and reproducibility
  int64_t fast_dev_run = 0;           // n > 0: n batches of each loop, one epoch, no logging/checkpoints
  BatchLimit overfit_batches = BatchLimit::fraction(0.0);  // > 0: train and validate on these train batches
  bool deterministic = false;         // deterministic algorithms only
  std::optional<uint64_t> seed;       // seeds torch and volt's samplers

  // Throws ConfigurationError naming the flag, the value and what is allowed.
  void validate() const;
  // max_time as a duration (unset when empty); throws ConfigurationError when malformed.
  std::optional<std::chrono::seconds> max_time_duration() const;
  // max_epochs after Lightning's defaulting rule; -1 means no limit.
  int64_t resolved_max_epochs() const;
  // What devices, num_nodes, node_rank and master_addr/port ask of the cluster environment.
  ClusterRequest cluster_request() const;

  // Parses volt's flags (and, when given, the program's own flags beside them). Throws
  // HelpRequested for --help / --list-strategies (volt::run_main prints it and exits 0) and
  // ConfigurationError for an unknown flag or a bad value.
  static TrainerOptions from_args(int argc, const char* const argv[]);
  static TrainerOptions from_args(int argc, const char* const argv[],
                                  const boost::program_options::options_description& program_options,
                                  boost::program_options::variables_map* program_values);
};

// Not an error: the user asked for help text, which this carries (what()).
class HelpRequested : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace volt
