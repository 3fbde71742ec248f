#include "data/image/resample.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace volt::image {

AxisTaps taps_of(const AxisMap& axis) {
  AxisTaps taps;
  const auto n = static_cast<size_t>(axis.size);
  taps.first.resize(n);
  taps.count.resize(n);
  if (axis.identity()) {
    taps.width = 1;
    taps.weights.assign(n, 1.0f);
    for (size_t i = 0; i < n; ++i) {
      taps.first[i] = axis.low + static_cast<int64_t>(i);
      taps.count[i] = 1;
    }
    taps.low = axis.low;
    taps.high = axis.high;
    return taps;
  }
  // ATen's _compute_indices_min_size_weights_aa with interp_size 2 (bilinear), in coordinates
  // relative to `low`; weights in double, stored as float.
  const double scale = axis.scale;
  const double support = scale >= 1.0 ? scale : 1.0;
  const double invscale = scale >= 1.0 ? 1.0 / scale : 1.0;
  const int64_t extent = axis.high - axis.low;
  taps.width = static_cast<int64_t>(std::ceil(support)) * 2 + 1;
  taps.weights.assign(n * static_cast<size_t>(taps.width), 0.0f);
  taps.low = axis.high;
  taps.high = axis.low;
  std::vector<double> w(static_cast<size_t>(taps.width));
  for (size_t i = 0; i < n; ++i) {
    const double center = axis.start - static_cast<double>(axis.low) + (static_cast<double>(i) + 0.5) * scale;
    const int64_t xmin = std::max<int64_t>(static_cast<int64_t>(center - support + 0.5), 0);
    const int64_t xmax = std::min<int64_t>(static_cast<int64_t>(center + support + 0.5), extent);
    const int64_t count = std::max<int64_t>(xmax - xmin, 1);
    VOLT_INTERNAL_ASSERT(count <= taps.width, "resample: ", count, " taps for a filter of ", taps.width);
    double total = 0;
    for (int64_t j = 0; j < count; ++j) {
      const double t = (static_cast<double>(j + xmin) - center + 0.5) * invscale;
      w[static_cast<size_t>(j)] = std::max(0.0, 1.0 - std::abs(t));
      total += w[static_cast<size_t>(j)];
    }
    float* out = &taps.weights[i * static_cast<size_t>(taps.width)];
    for (int64_t j = 0; j < count; ++j) out[j] = static_cast<float>(total != 0 ? w[static_cast<size_t>(j)] / total : 0);
    taps.first[i] = axis.low + xmin;
    taps.count[i] = count;
    taps.low = std::min(taps.low, taps.first[i]);
    taps.high = std::max(taps.high, taps.first[i] + count);
  }
  return taps;
}

namespace {

// Along x for one source row: output pixel i is the weighted sum of its taps, per channel. The
// channel count is a template argument so that the per-channel sums unroll into registers.
template <int64_t Channels>
void resample_row(const uint8_t* src, const AxisTaps& x, int64_t source_left, float* dst) {
  const auto out_w = static_cast<int64_t>(x.first.size());
  for (int64_t i = 0; i < out_w; ++i) {
    const float* w = &x.weights[static_cast<size_t>(i * x.width)];
    const uint8_t* p = src + (x.first[static_cast<size_t>(i)] - source_left) * Channels;
    const int64_t count = x.count[static_cast<size_t>(i)];
    float sum[Channels] = {};
    for (int64_t j = 0; j < count; ++j) {
      for (int64_t c = 0; c < Channels; ++c) sum[c] += static_cast<float>(p[j * Channels + c]) * w[j];
    }
    for (int64_t c = 0; c < Channels; ++c) dst[i * Channels + c] = sum[c];
  }
}

}  // namespace

void resample(const Pixels& source, int64_t source_top, int64_t source_left, const AxisTaps& y, const AxisTaps& x,
              std::vector<float>& out) {
  const int64_t channels = source.channels;
  VOLT_INTERNAL_ASSERT(channels == 1 || channels == 3, "resample: ", channels, " channels");
  const auto out_h = static_cast<int64_t>(y.first.size());
  const auto out_w = static_cast<int64_t>(x.first.size());
  VOLT_INTERNAL_ASSERT(y.low >= source_top && y.high <= source_top + source.height && x.low >= source_left &&
                           x.high <= source_left + source.width,
                       "resample: the source does not cover the taps");
  // Along x for every source row the y taps read, into rows of out_w × channels floats. The
  // buffer is the thread's own and keeps its size from one image to the next: a fresh one each
  // time would be fresh pages each time, faulted in and zeroed by the kernel.
  const int64_t rows = y.high - y.low;
  const int64_t row_floats = out_w * channels;
  thread_local std::vector<float> horizontal;
  horizontal.resize(static_cast<size_t>(rows * row_floats));
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* src = source.row(y.low + r - source_top);
    float* dst = &horizontal[static_cast<size_t>(r * row_floats)];
    if (channels == 3) {
      resample_row<3>(src, x, source_left, dst);
    } else {
      resample_row<1>(src, x, source_left, dst);
    }
  }
  // Along y: each output row a weighted sum of whole horizontal rows.
  out.resize(static_cast<size_t>(out_h * row_floats));
  for (int64_t i = 0; i < out_h; ++i) {
    const float* w = &y.weights[static_cast<size_t>(i * y.width)];
    float* dst = &out[static_cast<size_t>(i * row_floats)];
    const float* first = &horizontal[static_cast<size_t>((y.first[static_cast<size_t>(i)] - y.low) * row_floats)];
    for (int64_t k = 0; k < row_floats; ++k) dst[k] = first[k] * w[0];
    for (int64_t j = 1; j < y.count[static_cast<size_t>(i)]; ++j) {
      const float* src = first + j * row_floats;
      const float weight = w[j];
      for (int64_t k = 0; k < row_floats; ++k) dst[k] += src[k] * weight;
    }
  }
}

}  // namespace volt::image
