#include "data/memmap_token_dataset.h"

#include <cstring>

#include "core/error.h"

namespace volt {
namespace {

size_t bytes_of(TokenDtype dtype) { return dtype == TokenDtype::UInt16 ? 2 : 4; }
const char* name_of(TokenDtype dtype) { return dtype == TokenDtype::UInt16 ? "uint16" : "uint32"; }

template <typename Stored>
void widen(const uint8_t* data, int64_t first, int64_t count, int64_t* out) {
  Stored value;
  for (int64_t i = 0; i < count; ++i) {
    std::memcpy(&value, data + static_cast<size_t>(first + i) * sizeof(Stored), sizeof(Stored));
    out[i] = static_cast<int64_t>(value);
  }
}

}  // namespace

void MemmapTokenOptions::validate() const {
  check<ConfigurationError>(!path.empty(), "MemmapTokenDataset: expected the path of a token file, got none");
  check<ConfigurationError>(block_size >= 1, "MemmapTokenDataset: expected block_size >= 1, got ", block_size);
  check<ConfigurationError>(samples_per_epoch >= 0, "MemmapTokenDataset: expected samples_per_epoch >= 0, got ",
                            samples_per_epoch);
  check<ConfigurationError>(samples_per_epoch == 0 || windows == Windows::Random,
                            "MemmapTokenDataset: samples_per_epoch applies to random windows; sequential windows "
                            "cover the file once per epoch");
  check<ConfigurationError>(vocab_size >= 0, "MemmapTokenDataset: expected vocab_size >= 0 (0: unchecked), got ",
                            vocab_size);
}

MemmapTokenDataset::MemmapTokenDataset(MemmapTokenOptions options) : options_(std::move(options)) {
  options_.validate();
  file_ = std::make_shared<const MemoryMappedFile>(options_.path);
  const size_t width = bytes_of(options_.dtype);
  check<DataError>(file_->size() % width == 0, "MemmapTokenDataset: ", options_.path, " has ", file_->size(),
                   " bytes, not a multiple of ", width, " (", name_of(options_.dtype),
                   " token ids); is it a token file of this dtype, and was it written completely?");
  tokens_ = static_cast<int64_t>(file_->size() / width);
  check<DataError>(tokens_ >= options_.block_size + 1, "MemmapTokenDataset: ", options_.path, " holds ", tokens_,
                   " tokens; a window of block_size ", options_.block_size, " needs ", options_.block_size + 1,
                   " (its target is shifted by one)");
  if (options_.windows == MemmapTokenOptions::Windows::Sequential) {
    samples_ = (tokens_ - 1) / options_.block_size;
  } else {
    samples_ = options_.samples_per_epoch > 0 ? options_.samples_per_epoch : tokens_ / options_.block_size;
  }
}

int64_t MemmapTokenDataset::token(int64_t position) const {
  check<ConfigurationError>(position >= 0 && position < tokens_, "MemmapTokenDataset: token ", position,
                            " is outside [0, ", tokens_, ")");
  int64_t value = 0;
  if (options_.dtype == TokenDtype::UInt16) {
    widen<uint16_t>(file_->data(), position, 1, &value);
  } else {
    widen<uint32_t>(file_->data(), position, 1, &value);
  }
  return value;
}

int64_t MemmapTokenDataset::window_start(int64_t index, const BatchRequest& request, size_t position) const {
  if (options_.windows == MemmapTokenOptions::Windows::Sequential) return index * options_.block_size;
  SampleRandom random = request.random(position);
  return random.integer(0, tokens_ - options_.block_size);
}

Batch MemmapTokenDataset::get_batch(const BatchRequest& request) const {
  const auto batch = static_cast<int64_t>(request.indices.size());
  const int64_t t = options_.block_size;
  const auto options = torch::TensorOptions().dtype(torch::kLong).pinned_memory(request.pin_memory);
  Batch result;
  result.input = torch::empty({batch, t}, options);
  result.target = torch::empty({batch, t}, options);
  int64_t* input = result.input.data_ptr<int64_t>();
  int64_t* target = result.target.data_ptr<int64_t>();
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t index = request.indices[static_cast<size_t>(b)];
    check<ConfigurationError>(index >= 0 && index < samples_, "MemmapTokenDataset: sample ", index,
                              " is outside [0, ", samples_, ")");
    const int64_t start = window_start(index, request, static_cast<size_t>(b));
    int64_t* in = input + b * t;
    if (options_.dtype == TokenDtype::UInt16) {
      widen<uint16_t>(file_->data(), start, t, in);
      widen<uint16_t>(file_->data(), start + t, 1, target + b * t + t - 1);
    } else {
      widen<uint32_t>(file_->data(), start, t, in);
      widen<uint32_t>(file_->data(), start + t, 1, target + b * t + t - 1);
    }
    // The target is the input shifted by one token.
    std::memcpy(target + b * t, in + 1, static_cast<size_t>(t - 1) * sizeof(int64_t));
    if (options_.vocab_size > 0) {
      for (int64_t i = 0; i <= t; ++i) {
        const int64_t id = i < t ? in[i] : target[b * t + t - 1];
        check<DataError>(id < options_.vocab_size, "MemmapTokenDataset: ", options_.path, " has token id ", id,
                         " at position ", start + i, ", not below vocab_size ", options_.vocab_size, " (sample ",
                         index, ")");
      }
    }
  }
  return result;
}

}  // namespace volt
