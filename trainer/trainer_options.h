#pragma once
// Everything a Trainer can be told, with Lightning's names and defaults. Each field is also a
// command-line flag in dash form (max_epochs → --max-epochs), declared once in schema(): its help,
// its default and what values it accepts; `--help` lists them with defaults.
#include <chrono>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/error.h"
#include "run/batch_limit.h"
#include "run/run_options.h"
#include "trainer/gradient_clip_algorithm.h"

namespace boost::program_options {
class options_description;
class variables_map;
}  // namespace boost::program_options

namespace volt {

// RunOptions (run_options.h): the hardware, distribution and reproducibility settings, shared
// with the Fabric; the rest: the loops'.
struct TrainerOptions : RunOptions {
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

  // ---- fault tolerance
  // "replicas=R,replica=I,lighthouse=HOST:PORT[,timeout=S,quorum_timeout=S]": this launch is
  // replica group I of R, which heal and average through volt-lighthouse (docs/fault_tolerance.md,
  // run/fault_tolerance/fault_tolerance_options.h). Empty: off.
  std::string fault_tolerance;

  // ---- debugging
  int64_t fast_dev_run = 0;           // n > 0: n batches of each loop, one epoch, no logging/checkpoints
  BatchLimit overfit_batches = BatchLimit::fraction(0.0);  // > 0: train and validate on these train batches

  // Throws ConfigurationError naming the flag, the value and what is allowed (RunOptions's checks too).
  void validate() const;
  // Every field's flag: RunOptions's (run/run_option_flags.h) and the loops'. The command line,
  // `--config`, `--print-config` and `--help` read it.
  static const OptionSchema<TrainerOptions>& schema();
  // The run's settings alone: what a Fabric is told (FabricOptions).
  const RunOptions& run_options() const { return *this; }
  // max_time as a duration (unset when empty); throws ConfigurationError when malformed.
  std::optional<std::chrono::seconds> max_time_duration() const;
  // max_epochs after Lightning's defaulting rule; -1 means no limit.
  int64_t resolved_max_epochs() const;

  // Note [What fault-tolerant replicas run] (trainer_options.cpp).
  void check_fault_tolerance() const;

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
