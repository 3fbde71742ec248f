#include "loggers/tensorboard/summary_proto.h"

#include <cmath>

#include "loggers/tensorboard/proto_encoder.h"

namespace volt::tensorboard {
namespace {

// tensorboard.Event
constexpr int kEventWallTime = 1, kEventStep = 2, kEventFileVersion = 3, kEventSummary = 5;
// tensorboard.Summary / Summary.Value
constexpr int kSummaryValue = 1;
constexpr int kValueTag = 1, kValueSimpleValue = 2, kValueHisto = 5, kValueTensor = 8, kValueMetadata = 9;
// tensorboard.SummaryMetadata / SummaryMetadata.PluginData
constexpr int kMetadataPluginData = 1;
constexpr int kPluginName = 1, kPluginContent = 2;
// tensorboard.TensorProto / TensorShapeProto / TensorShapeProto.Dim; DataType DT_STRING
constexpr int kTensorDtype = 1, kTensorShape = 2, kTensorStringVal = 8;
constexpr int kShapeDim = 2, kDimSize = 1;
constexpr int kDtString = 7;
// tensorboard.HistogramProto
constexpr int kHistoMin = 1, kHistoMax = 2, kHistoNum = 3, kHistoSum = 4, kHistoSumSquares = 5,
              kHistoBucketLimit = 6, kHistoBucket = 7;
// tensorboard.hparams.HParamsPluginData (version stays 0, the only version TensorBoard reads,
// which proto3 leaves unwritten), SessionStartInfo, SessionEndInfo
constexpr int kPluginDataSessionStart = 3, kPluginDataSessionEnd = 4;
constexpr int kStartHparams = 1, kStartTimeSecs = 5;
constexpr int kEndStatus = 1, kEndTimeSecs = 2;
// map<string, google.protobuf.Value> entries; google.protobuf.Value's kinds
constexpr int kMapKey = 1, kMapValue = 2;
constexpr int kNumberValue = 2, kStringValue = 3, kBoolValue = 4;

constexpr const char* kSessionStartTag = "_hparams_/session_start_info";
constexpr const char* kSessionEndTag = "_hparams_/session_end_info";

std::string event_with_summary(const ProtoEncoder& value, int64_t step, double wall_time) {
  ProtoEncoder summary;
  summary.message(kSummaryValue, value);
  ProtoEncoder event;
  event.float64(kEventWallTime, wall_time).int64(kEventStep, step).message(kEventSummary, summary);
  return event.data();
}

ProtoEncoder plugin_metadata(const std::string& plugin, const std::string& content) {
  ProtoEncoder plugin_data;
  plugin_data.bytes(kPluginName, plugin);
  plugin_data.bytes(kPluginContent, content);
  ProtoEncoder metadata;
  metadata.message(kMetadataPluginData, plugin_data);
  return metadata;
}

std::string hparams_event(const char* tag, int data_field, const ProtoEncoder& data, double wall_time) {
  ProtoEncoder plugin_data;
  plugin_data.message(data_field, data);
  ProtoEncoder value;
  value.bytes(kValueTag, tag).message(kValueMetadata, plugin_metadata("hparams", plugin_data.data()));
  return event_with_summary(value, 0, wall_time);
}

ProtoEncoder struct_value(const HyperparameterValue& hparam) {
  ProtoEncoder value;
  std::visit(
      [&](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, bool>) {
          value.varint(kBoolValue, v ? 1 : 0, /*always=*/true);  // google.protobuf.Value's kinds are a oneof
        } else if constexpr (std::is_same_v<T, std::string>) {
          value.bytes(kStringValue, v, true);
        } else {
          value.float64(kNumberValue, static_cast<double>(v), true);
        }
      },
      hparam);
  return value;
}

}  // namespace

std::string file_version_event(double wall_time) {
  ProtoEncoder event;
  event.float64(kEventWallTime, wall_time).bytes(kEventFileVersion, "brain.Event:2", /*always=*/true);
  return event.data();
}

std::string scalar_event(const std::string& tag, float value, int64_t step, double wall_time) {
  ProtoEncoder summary_value;
  summary_value.bytes(kValueTag, tag).float32(kValueSimpleValue, value, /*always=*/true);  // a oneof member
  return event_with_summary(summary_value, step, wall_time);
}

std::string text_event(const std::string& tag, const std::string& text, int64_t step, double wall_time) {
  ProtoEncoder dim;
  dim.int64(kDimSize, 1);
  ProtoEncoder shape;
  shape.message(kShapeDim, dim);
  ProtoEncoder tensor;
  tensor.varint(kTensorDtype, kDtString).message(kTensorShape, shape).bytes(kTensorStringVal, text, /*always=*/true);
  ProtoEncoder value;
  value.bytes(kValueTag, tag + "/text_summary")
      .message(kValueTensor, tensor)
      .message(kValueMetadata, plugin_metadata("text", ""));
  return event_with_summary(value, step, wall_time);
}

std::optional<Histogram> make_histogram(const torch::Tensor& values, int64_t bins) {
  auto flat = values.detach().to(torch::kCPU, torch::kDouble).flatten();
  flat = flat.masked_select(torch::isfinite(flat));
  if (flat.numel() == 0) return std::nullopt;
  Histogram h;
  h.min = flat.min().item<double>();
  h.max = flat.max().item<double>();
  h.num = static_cast<double>(flat.numel());
  h.sum = flat.sum().item<double>();
  h.sum_squares = (flat * flat).sum().item<double>();
  if (h.min == h.max) {
    h.bucket_limit = {h.max};
    h.bucket = {h.num};
    return h;
  }
  const auto counts = torch::histc(flat, bins, h.min, h.max);
  const double width = (h.max - h.min) / static_cast<double>(bins);
  for (int64_t i = 0; i < bins; ++i) {
    h.bucket_limit.push_back(i + 1 == bins ? h.max : h.min + width * static_cast<double>(i + 1));
    h.bucket.push_back(counts[i].item<double>());
  }
  return h;
}

std::string histogram_event(const std::string& tag, const Histogram& h, int64_t step, double wall_time) {
  ProtoEncoder histo;
  histo.float64(kHistoMin, h.min)
      .float64(kHistoMax, h.max)
      .float64(kHistoNum, h.num)
      .float64(kHistoSum, h.sum)
      .float64(kHistoSumSquares, h.sum_squares)
      .packed_float64(kHistoBucketLimit, h.bucket_limit)
      .packed_float64(kHistoBucket, h.bucket);
  ProtoEncoder value;
  value.bytes(kValueTag, tag).message(kValueHisto, histo);
  return event_with_summary(value, step, wall_time);
}

std::string hparams_session_start_event(const Hyperparameters& hparams, double wall_time) {
  ProtoEncoder start;
  for (const auto& [name, hparam] : hparams) {
    ProtoEncoder entry;
    entry.bytes(kMapKey, name, /*always=*/true).message(kMapValue, struct_value(hparam));  // map entries keep both
    start.message(kStartHparams, entry);
  }
  start.float64(kStartTimeSecs, wall_time);
  return hparams_event(kSessionStartTag, kPluginDataSessionStart, start, wall_time);
}

std::string hparams_session_end_event(SessionStatus status, double wall_time) {
  ProtoEncoder end;
  end.varint(kEndStatus, static_cast<uint64_t>(status)).float64(kEndTimeSecs, wall_time);
  return hparams_event(kSessionEndTag, kPluginDataSessionEnd, end, wall_time);
}

}  // namespace volt::tensorboard
