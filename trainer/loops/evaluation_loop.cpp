#include "trainer/loops/evaluation_loop.h"

#include "strategies/device_feed.h"

#include "trainer/loops/loop_hooks.h"
#include "trainer/trainer.h"
#include "strategies/strategy.h"

namespace volt {
namespace {

const BatchLimit& limit_for(const TrainerOptions& options, RunningStage stage) {
  switch (stage) {
    case RunningStage::Testing: return options.limit_test_batches;
    case RunningStage::Predicting: return options.limit_predict_batches;
    default: return options.limit_val_batches;
  }
}

// Restores the module's training flag and the trainer's stage when the loop ends, also by an error.
struct EvaluationScope {
  EvaluationScope(Module& module, RunningStage& stage, RunningStage now)
      : module_(module), stage_(stage), previous_stage_(stage), was_training_(module.is_training()) {
    stage_ = now;
    module_.eval();
  }
  ~EvaluationScope() {
    module_.train(was_training_);
    stage_ = previous_stage_;
  }
  Module& module_;
  RunningStage& stage_;
  RunningStage previous_stage_;
  bool was_training_;
  torch::NoGradGuard no_grad_;
};

}  // namespace

EvaluationLoop::EvaluationLoop(const LoopContext& context, RunningStage stage, std::shared_ptr<DataLoader> loader,
                               int64_t max_batches)
    : trainer_(context.trainer),
      strategy_(context.strategy),
      state_(context.state),
      stage_(stage),
      loader_(std::move(loader)) {
  const auto& options = trainer_.options();
  loader_->set_epoch(0);
  num_batches_ = options.fast_dev_run > 0
                     ? std::min(options.fast_dev_run, loader_->num_batches())
                     : limit_for(options, stage).resolve(loader_->num_batches());
  if (max_batches >= 0) num_batches_ = std::min(num_batches_, max_batches);
}

std::map<std::string, double> EvaluationLoop::run() {
  Trainer& t = trainer_;
  Module& module = *state_.module;
  const bool sanity = stage_ == RunningStage::SanityChecking;
  const bool testing = stage_ == RunningStage::Testing;
  EvaluationScope scope(module, state_.stage, stage_);
  state_.num_eval_batches = num_batches_;
  state_.eval_collector.reset(stage_);

  if (sanity) call_callbacks(t, module, &Callback::on_sanity_check_start);
  call_callbacks(t, module, testing ? &Callback::on_test_start : &Callback::on_validation_start);
  call_callbacks(t, module, testing ? &Callback::on_test_epoch_start : &Callback::on_validation_epoch_start);
  testing ? module.on_test_epoch_start() : module.on_validation_epoch_start();

  DeviceFeed feed = DeviceFeed::open(*loader_, 0, num_batches_, strategy_);
  for (int64_t b = 0; b < num_batches_; ++b) {
    const Batch batch = feed.next();
    call_callbacks(t, module, testing ? &Callback::on_test_batch_start : &Callback::on_validation_batch_start, batch,
                   b);
    state_.eval_collector.begin_batch();
    state_.eval_collector.set_in_step(true, batch.size());
    try {
      strategy_.run_step(stage_, module, batch, [&](torch::nn::Module& given, const Batch& input) {
        Module& step = step_module(given, module);
        testing ? step.test_step(input, b) : step.validation_step(input, b);
        return torch::Tensor();
      });
    } catch (const StepNotDefined& e) {
      // Test needs a test_step. A module without validation_step simply is not validated: this
      // first pass ends empty and the fit loop schedules no further validation.
      if (testing) throw ConfigurationError(e.what());
      state_.validation_step_defined = false;
      state_.eval_collector.set_in_step(false);
      break;
    }
    state_.eval_collector.set_in_step(false);
    call_callbacks(t, module, testing ? &Callback::on_test_batch_end : &Callback::on_validation_batch_end, batch, b);
  }

  call_callbacks(t, module, testing ? &Callback::on_test_epoch_end : &Callback::on_validation_epoch_end);
  testing ? module.on_test_epoch_end() : module.on_validation_epoch_end();
  std::map<std::string, double> metrics;
  const MetricValues values = state_.eval_collector.epoch_values();
  if (!sanity) {
    publish_metrics(t, state_, values, true);
    metrics = read_metrics(values.callback);
  }
  call_callbacks(t, module, testing ? &Callback::on_test_end : &Callback::on_validation_end);
  if (sanity) call_callbacks(t, module, &Callback::on_sanity_check_end);
  return metrics;
}

std::vector<torch::Tensor> EvaluationLoop::predict() {
  Trainer& t = trainer_;
  Module& module = *state_.module;
  EvaluationScope scope(module, state_.stage, stage_);
  state_.num_eval_batches = num_batches_;
  state_.eval_collector.reset(stage_);
  std::vector<torch::Tensor> predictions;
  call_callbacks(t, module, &Callback::on_predict_start);
  DeviceFeed feed = DeviceFeed::open(*loader_, 0, num_batches_, strategy_);
  for (int64_t b = 0; b < num_batches_; ++b) {
    const Batch batch = feed.next();
    call_callbacks(t, module, &Callback::on_predict_batch_start, batch, b);
    torch::Tensor prediction;
    try {
      prediction = strategy_.run_step(stage_, module, batch,
                                     [&](torch::nn::Module& given, const Batch& input) {
                                       return step_module(given, module).predict_step(input, b);
                                     });
    } catch (const StepNotDefined& e) {
      throw ConfigurationError(e.what());
    }
    call_callbacks(t, module, &Callback::on_predict_batch_end, prediction, batch, b);
    predictions.push_back(prediction);
  }
  call_callbacks(t, module, &Callback::on_predict_end);
  return predictions;
}

}  // namespace volt
