#include "trainer/loops/evaluation_loop.h"

#include "trainer/trainer.h"

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

EvaluationLoop::EvaluationLoop(Trainer& trainer, RunningStage stage, std::shared_ptr<DataLoader> loader,
                               int64_t max_batches)
    : trainer_(trainer), stage_(stage), loader_(std::move(loader)) {
  const auto& options = trainer_.options_;
  loader_->set_epoch(0);
  num_batches_ = options.fast_dev_run > 0
                     ? std::min(options.fast_dev_run, loader_->num_batches())
                     : limit_for(options, stage).resolve(loader_->num_batches());
  if (max_batches >= 0) num_batches_ = std::min(num_batches_, max_batches);
}

std::map<std::string, double> EvaluationLoop::run() {
  Trainer& t = trainer_;
  Module& module = *t.module_;
  const bool sanity = stage_ == RunningStage::SanityChecking;
  const bool testing = stage_ == RunningStage::Testing;
  EvaluationScope scope(module, t.stage_, stage_);
  t.num_eval_batches_ = num_batches_;
  t.eval_collector_.reset(stage_);

  if (sanity) t.call_callbacks(&Callback::on_sanity_check_start);
  t.call_callbacks(testing ? &Callback::on_test_start : &Callback::on_validation_start);
  t.call_callbacks(testing ? &Callback::on_test_epoch_start : &Callback::on_validation_epoch_start);
  testing ? module.on_test_epoch_start() : module.on_validation_epoch_start();

  for (int64_t b = 0; b < num_batches_; ++b) {
    const Batch batch = t.precision_->convert_input(loader_->batch(b).to(t.strategy_->root_device()));
    t.call_callbacks(testing ? &Callback::on_test_batch_start : &Callback::on_validation_batch_start, batch, b);
    t.eval_collector_.begin_batch();
    t.eval_collector_.set_in_step(true, batch.size());
    try {
      auto context = t.strategy_->forward_context(stage_);
      testing ? module.test_step(batch, b) : module.validation_step(batch, b);
    } catch (const StepNotDefined& e) {
      // Test needs a test_step. A module without validation_step simply is not validated: this
      // first pass ends empty and the fit loop schedules no further validation.
      if (testing) throw ConfigurationError(e.what());
      t.validation_step_defined_ = false;
      t.eval_collector_.set_in_step(false);
      break;
    }
    t.eval_collector_.set_in_step(false);
    t.call_callbacks(testing ? &Callback::on_test_batch_end : &Callback::on_validation_batch_end, batch, b);
  }

  t.call_callbacks(testing ? &Callback::on_test_epoch_end : &Callback::on_validation_epoch_end);
  testing ? module.on_test_epoch_end() : module.on_validation_epoch_end();
  std::map<std::string, double> metrics;
  const MetricValues values = t.eval_collector_.epoch_values();
  if (!sanity) {
    t.publish_metrics(values, true);
    metrics = values.callback;
  }
  t.call_callbacks(testing ? &Callback::on_test_end : &Callback::on_validation_end);
  if (sanity) t.call_callbacks(&Callback::on_sanity_check_end);
  return metrics;
}

std::vector<torch::Tensor> EvaluationLoop::predict() {
  Trainer& t = trainer_;
  Module& module = *t.module_;
  EvaluationScope scope(module, t.stage_, stage_);
  t.num_eval_batches_ = num_batches_;
  t.eval_collector_.reset(stage_);
  std::vector<torch::Tensor> predictions;
  t.call_callbacks(&Callback::on_predict_start);
  for (int64_t b = 0; b < num_batches_; ++b) {
    const Batch batch = t.precision_->convert_input(loader_->batch(b).to(t.strategy_->root_device()));
    t.call_callbacks(&Callback::on_predict_batch_start, batch, b);
    torch::Tensor prediction;
    {
      auto context = t.strategy_->forward_context(stage_);
      try {
        prediction = module.predict_step(batch, b);
      } catch (const StepNotDefined& e) {
        throw ConfigurationError(e.what());
      }
    }
    t.call_callbacks(&Callback::on_predict_batch_end, prediction, batch, b);
    predictions.push_back(prediction);
  }
  t.call_callbacks(&Callback::on_predict_end);
  return predictions;
}

}  // namespace volt
