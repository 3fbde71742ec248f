#include "loggers/tensorboard_logger.h"

#include <torch/torch.h>

#include <filesystem>

#include "loggers/hparams_yaml.h"
#include "loggers/tensorboard/summary_proto.h"
#include "core/error.h"

namespace volt {

const OptionSchema<TensorBoardLoggerOptions>& TensorBoardLoggerOptions::schema() {
  using O = TensorBoardLoggerOptions;
  static const auto schema =
      log_directory_schema<O>("TensorBoardLogger")
          .option("histogram_every_n_epochs", &O::histogram_every_n_epochs,
                  "write a histogram of every parameter every n epochs (0: never)", at_least(0))
          .option("histogram_bins", &O::histogram_bins, "buckets per histogram", at_least(1));
  return schema;
}

TensorBoardLogger::TensorBoardLogger(TensorBoardLoggerOptions options)
    : name_(options.name), directory_(options.save_dir, options.name, options.version),
      histogram_every_n_epochs_(options.histogram_every_n_epochs), histogram_bins_(options.histogram_bins) {
  options.validate();
}

TensorBoardLogger::TensorBoardLogger(std::string save_dir, std::string name, int64_t version,
                                     int64_t histogram_every_n_epochs, int64_t histogram_bins)
    : TensorBoardLogger(TensorBoardLoggerOptions{std::move(save_dir), std::move(name), version,
                                                 histogram_every_n_epochs, histogram_bins}) {}

tensorboard::EventFileWriter& TensorBoardLogger::writer() {
  if (!writer_) writer_ = std::make_unique<tensorboard::EventFileWriter>(log_dir());
  return *writer_;
}

void TensorBoardLogger::log_metrics(const std::map<std::string, double>& metrics, int64_t step) {
  const double now = tensorboard::wall_time_now();
  for (const auto& [tag, value] : metrics) {
    if (tag == "epoch") continue;
    writer().write(tensorboard::scalar_event(tag, static_cast<float>(value), step, now));
  }
  writer().flush();
}

void TensorBoardLogger::log_hyperparams(const Hyperparameters& hparams) {
  directory_.create();
  write_hparams_yaml((std::filesystem::path(log_dir()) / "hparams.yaml").string(), hparams);
  writer().write(tensorboard::hparams_session_start_event(hparams, tensorboard::wall_time_now()));
  writer().flush();
  session_open_ = true;
}

void TensorBoardLogger::log_epoch_end(const torch::nn::Module& module, int64_t epoch, int64_t step) {
  if (histogram_every_n_epochs_ == 0 || (epoch + 1) % histogram_every_n_epochs_ != 0) return;
  for (const auto& parameter : module.named_parameters(/*recurse=*/true)) {
    log_histogram(parameter.key(), parameter.value(), step);
  }
  writer().flush();
}

void TensorBoardLogger::log_text(const std::string& tag, const std::string& text, int64_t step) {
  writer().write(tensorboard::text_event(tag, text, step, tensorboard::wall_time_now()));
  writer().flush();
}

void TensorBoardLogger::log_histogram(const std::string& tag, const torch::Tensor& values, int64_t step) {
  check<ConfigurationError>(values.defined(), "TensorBoardLogger::log_histogram('", tag,
                            "'): expected a defined tensor");
  if (auto histogram = tensorboard::make_histogram(values, histogram_bins_)) {
    writer().write(tensorboard::histogram_event(tag, *histogram, step, tensorboard::wall_time_now()));
  }
}

void TensorBoardLogger::save() {
  if (writer_) writer_->flush();
}

void TensorBoardLogger::finalize(TrainerStatus status) {
  if (session_open_) {
    const auto session = status == TrainerStatus::Finished ? tensorboard::SessionStatus::Success
                                                           : tensorboard::SessionStatus::Failure;
    writer().write(tensorboard::hparams_session_end_event(session, tensorboard::wall_time_now()));
    session_open_ = false;
  }
  save();
}

}  // namespace volt
