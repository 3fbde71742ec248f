#include "trainer/trainer_options.h"

#include "core/duration.h"
#include "core/option_schema.h"
#include "precision/precision.h"
#include "run/fault_tolerance/fault_tolerance_options.h"
#include "run/run_option_flags.h"

namespace volt {
namespace {

// Lightning's float-or-int limits: "0.25" a fraction, "10" a count (BatchLimit).
TextForm<BatchLimit> batch_limit_form() {
  return {"a fraction in [0, 1] written with a decimal point, or a count of batches",
          [](const std::string& text) { return BatchLimit::parse(text, "the value"); },
          [](const BatchLimit& limit) { return limit.to_string(); }};
}

bool is_duration_or_empty(const std::string& text) {
  if (text.empty()) return true;
  try {
    parse_duration(text, "--max-time");
    return true;
  } catch (const ConfigurationError&) {
    return false;
  }
}

}  // namespace

const OptionSchema<TrainerOptions>& TrainerOptions::schema() {
  using O = TrainerOptions;
  static const auto schema = [] {
    OptionSchema<O> declared("volt Trainer options", KeyNaming::Flag);
    declare_run_flags(declared)
        .option("max-epochs", &O::max_epochs, "epochs to train (default 1000 unless --max-steps; -1: no limit)",
                satisfies([](const int64_t& n) { return n >= -1; }, "a value >= -1 (-1: no limit)"))
        .option("min-epochs", &O::min_epochs, "epochs before early stopping or --max-time may stop",
                at_least<int64_t>(0))
        .option("max-steps", &O::max_steps, "optimizer steps to train (-1: no limit)",
                satisfies([](const int64_t& n) { return n >= -1; }, "-1 (no limit) or a value >= 0"))
        .option("max-time", &O::max_time, "wall-clock limit DD:HH:MM:SS (once --min-epochs are done)",
                satisfies(is_duration_or_empty, "a duration DD:HH:MM:SS (e.g. 00:12:00:00), or nothing: no limit"))
        .option("accumulate-grad-batches", &O::accumulate_grad_batches, "micro-batches per optimizer step",
                at_least<int64_t>(1))
        .option("gradient-clip-val", &O::gradient_clip_val, "clip gradients at this value (default: no clipping)",
                greater_than(0.0))
        .choice("gradient-clip-algorithm", &O::gradient_clip_algorithm,
                {{"norm", GradientClipAlgorithm::Norm}, {"value", GradientClipAlgorithm::Value}},
                "norm | value: what --gradient-clip-val bounds")
        .option("val-check-interval", &O::val_check_interval, batch_limit_form(),
                "fraction of an epoch, or batches, between validations",
                satisfies([](const BatchLimit& l) { return !l.is_zero(); },
                          "a positive fraction or count (--limit-val-batches 0 disables validation)"))
        .option("check-val-every-n-epoch", &O::check_val_every_n_epoch, "validate every n epochs",
                at_least<int64_t>(1))
        .option("limit-train-batches", &O::limit_train_batches, batch_limit_form(),
                "fraction or number of training batches per epoch")
        .option("limit-val-batches", &O::limit_val_batches, batch_limit_form(),
                "fraction or number of validation batches")
        .option("limit-test-batches", &O::limit_test_batches, batch_limit_form(), "fraction or number of test batches")
        .option("limit-predict-batches", &O::limit_predict_batches, batch_limit_form(),
                "fraction or number of predict batches")
        .option("num-sanity-val-steps", &O::num_sanity_val_steps, "validation batches run before training (-1: all)",
                satisfies([](const int64_t& n) { return n >= -1; }, "-1 (all) or a value >= 0"))
        .option("log-every-n-steps", &O::log_every_n_steps, "optimizer steps between logger writes",
                at_least<int64_t>(1))
        .option("default-root-dir", &O::default_root_dir, "root of logs and checkpoints",
                satisfies([](const std::string& dir) { return !dir.empty(); }, "a directory"))
        .repeated("logger", &O::loggers,
                  "NAME[:key=value,...]: a registered logger (see --list-loggers); 'none': no logger", "none")
        .repeated("callback", &O::callbacks,
                  "NAME[:key=value,...]: a registered callback (see --list-callbacks); 'none': no callback", "none")
        .option("enable-checkpointing", &O::enable_checkpointing, "save checkpoints with a default ModelCheckpoint")
        .option("ckpt-path", &O::ckpt_path,
                "checkpoint to resume fit from: a file, or 'last' for the newest under --default-root-dir")
        .option("enable-progress-bar", &O::enable_progress_bar, "show a progress bar")
        .option("enable-model-summary", &O::enable_model_summary, "print a model summary at fit start")
        .option("fault-tolerance", &O::fault_tolerance,
                "replicas=R,replica=I,lighthouse=HOST:PORT[,timeout=S,quorum_timeout=S]: this launch is replica "
                "group I of R, healed from and averaged with the others through volt-lighthouse (default: off)")
        .option("fast-dev-run", &O::fast_dev_run, "run n batches of each loop once (no logging, no checkpoints)",
                at_least<int64_t>(0))
        .implicit_value("1")
        .option("overfit-batches", &O::overfit_batches, batch_limit_form(),
                "train and validate on this fraction or number of batches");
    return declared;
  }();
  return schema;
}

std::optional<std::chrono::seconds> TrainerOptions::max_time_duration() const {
  if (max_time.empty()) return std::nullopt;
  return parse_duration(max_time, "--max-time");
}

int64_t TrainerOptions::resolved_max_epochs() const {
  if (fast_dev_run > 0) return 1;
  if (max_epochs) return *max_epochs;
  return max_steps == -1 ? 1000 : -1;
}

void TrainerOptions::validate() const {
  schema().validate(*this);  // RunOptions's keys among them
  check_combinations();
  check<ConfigurationError>(!max_epochs || *max_epochs == -1 || min_epochs <= *max_epochs,
                            "--min-epochs: expected <= --max-epochs (", max_epochs.value_or(0), "), got ", min_epochs);
  if (!fault_tolerance.empty()) check_fault_tolerance();
}

// Note [What fault-tolerant replicas run]: a replica step is one micro-batch, the quorum's
// average, one optimizer step; the settings that would need more of the loop are refused.
void TrainerOptions::check_fault_tolerance() const {
  FaultToleranceOptions::parse(fault_tolerance);
  const std::string what = "--fault-tolerance: ";
  check<ConfigurationError>(accumulate_grad_batches == 1, what, "a replica step is one batch, but "
                            "--accumulate-grad-batches is ", accumulate_grad_batches,
                            "; use 1 (more replicas, or a larger --batch-size, give the larger batch)");
  check<ConfigurationError>(val_check_interval.is_fraction() && val_check_interval.fraction_value() == 1.0, what,
                            "replicas validate at the end of an epoch only; remove --val-check-interval");
  check<ConfigurationError>(canonical_precision_name(precision) != "16-mixed", what,
                            "16-mixed's loss scaler skips steps per replica, which would part the replicas; "
                            "use bf16-mixed or 32-true");
  check<ConfigurationError>(!cuda_graph, what, "a captured step cannot take part in a quorum; remove --cuda-graph");
  check<ConfigurationError>(fast_dev_run == 0 && overfit_batches.is_zero(), what,
                            "not with --fast-dev-run or --overfit-batches");
}

}  // namespace volt
