#include "loggers/tensorboard/proto_encoder.h"

#include <bit>
#include <cstring>

namespace volt::tensorboard {

void ProtoEncoder::raw_varint(uint64_t value) {
  while (value >= 0x80) {
    data_.push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  data_.push_back(static_cast<char>(value));
}

void ProtoEncoder::key(int field, int wire_type) {
  raw_varint((static_cast<uint64_t>(field) << 3) | static_cast<uint64_t>(wire_type));
}

template <typename T>
void ProtoEncoder::little_endian(T value) {
  unsigned char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  if constexpr (std::endian::native == std::endian::big) {
    for (size_t i = 0; i < sizeof(T) / 2; ++i) std::swap(bytes[i], bytes[sizeof(T) - 1 - i]);
  }
  data_.append(reinterpret_cast<const char*>(bytes), sizeof(T));
}

ProtoEncoder& ProtoEncoder::varint(int field, uint64_t value, bool always) {
  if (value == 0 && !always) return *this;
  key(field, 0);
  raw_varint(value);
  return *this;
}

ProtoEncoder& ProtoEncoder::float64(int field, double value, bool always) {
  if (std::bit_cast<uint64_t>(value) == 0 && !always) return *this;
  key(field, 1);
  little_endian(value);
  return *this;
}

ProtoEncoder& ProtoEncoder::float32(int field, float value, bool always) {
  if (std::bit_cast<uint32_t>(value) == 0 && !always) return *this;
  key(field, 5);
  little_endian(value);
  return *this;
}

ProtoEncoder& ProtoEncoder::bytes(int field, std::string_view value, bool always) {
  if (value.empty() && !always) return *this;
  key(field, 2);
  raw_varint(value.size());
  data_.append(value.data(), value.size());
  return *this;
}

ProtoEncoder& ProtoEncoder::packed_float64(int field, const std::vector<double>& values) {
  if (values.empty()) return *this;
  ProtoEncoder payload;
  for (double v : values) payload.little_endian(v);
  return bytes(field, payload.data_);
}

}  // namespace volt::tensorboard
