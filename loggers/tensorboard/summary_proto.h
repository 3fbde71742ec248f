#pragma once
// Serialized tensorboard.Event messages for what TensorBoardLogger writes: the file-version
// header, scalars, text, histograms and the HParams plugin's session records. Field numbers are
// those of tensorboard/compat/proto/{event,summary,tensor,tensor_shape,histogram}.proto and
// tensorboard/plugins/hparams/plugin_data.proto; tests/loggers/ reads the output back with
// protoc-generated Python code to prove them.
#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/hyperparameters.h"

namespace volt::tensorboard {

// The first record of every event file ("brain.Event:2" identifies the format).
std::string file_version_event(double wall_time);

// A scalar as TensorBoard's old-style simple_value (float32), which the Scalars tab reads.
std::string scalar_event(const std::string& tag, float value, int64_t step, double wall_time);

// Markdown text for the Text tab, stored under "<tag>/text_summary" as PyTorch's SummaryWriter does.
std::string text_event(const std::string& tag, const std::string& text, int64_t step, double wall_time);

// HistogramProto's content. Bucket i counts values in (bucket_limit[i-1], bucket_limit[i]].
struct Histogram {
  double min = 0, max = 0, num = 0, sum = 0, sum_squares = 0;
  std::vector<double> bucket_limit;
  std::vector<double> bucket;
};
// `bins` equal-width buckets over the finite values of `values` (non-finite values are not
// counted; std::nullopt when there is no finite value).
std::optional<Histogram> make_histogram(const torch::Tensor& values, int64_t bins);
std::string histogram_event(const std::string& tag, const Histogram& histogram, int64_t step, double wall_time);

// The HParams plugin's records for one run ("session"): its hyperparameter values at the start
// and its final status at the end. TensorBoard builds the HParams table from these records and
// the run's scalars (every scalar tag becomes a metric column).
enum class SessionStatus { Unknown = 0, Success = 1, Failure = 2, Running = 3 };
std::string hparams_session_start_event(const Hyperparameters& hparams, double wall_time);
std::string hparams_session_end_event(SessionStatus status, double wall_time);

}  // namespace volt::tensorboard
