#pragma once
// The few protobuf wire-format primitives TensorBoard's event files need, so that volt writes
// them without a protobuf dependency. Only encoding; field numbers live with the messages that
// use them (loggers/tensorboard/summary_proto.cpp). Wire format:
// https://protobuf.dev/programming-guides/encoding/ — a field is a varint key
// (field_number << 3 | wire_type) followed by its payload.
//
// Output is canonical, byte for byte what protobuf's own serializer writes, provided callers add
// fields in ascending field-number order: proto3 scalars holding their default (0, 0.0, "") are
// omitted unless `always` is set, which a oneof member needs (it is written even when zero).
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace volt::tensorboard {

class ProtoEncoder {
 public:
  // int32/int64/uint64/bool/enum: wire type 0 (varint). Negative values take ten bytes, as
  // protobuf writes them (two's complement, sign-extended to 64 bits).
  ProtoEncoder& varint(int field, uint64_t value, bool always = false);
  ProtoEncoder& int64(int field, int64_t value, bool always = false) {
    return varint(field, static_cast<uint64_t>(value), always);
  }
  // double: wire type 1 (8 bytes little-endian); float: wire type 5 (4 bytes little-endian).
  // "Default" means all bits zero, as protobuf's C++ serializer decides (-0.0 is written).
  ProtoEncoder& float64(int field, double value, bool always = false);
  ProtoEncoder& float32(int field, float value, bool always = false);
  // string/bytes: wire type 2 (varint length, then the bytes).
  ProtoEncoder& bytes(int field, std::string_view value, bool always = false);
  // An embedded message is always written (a set submessage is present even when empty).
  ProtoEncoder& message(int field, const ProtoEncoder& nested) { return bytes(field, nested.data(), true); }
  // repeated double [packed = true]: one length-delimited field of 8-byte values (none if empty).
  ProtoEncoder& packed_float64(int field, const std::vector<double>& values);

  const std::string& data() const { return data_; }

 private:
  void raw_varint(uint64_t value);
  void key(int field, int wire_type);
  template <typename T>
  void little_endian(T value);

  std::string data_;
};

}  // namespace volt::tensorboard
