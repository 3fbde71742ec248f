// The file format: every value type survives a round trip; damage of any kind (a flipped byte
// anywhere, truncation, a missing file, a file that is no checkpoint, a newer format) is a
// CheckpointError with a message saying what is wrong, never a crash or silently wrong content.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <sstream>

#include <caffe2/serialize/inline_container.h>

#include "tests/support/test_support.h"
#include "checkpoint/checkpoint_format.h"
#include "checkpoint/checkpoint_io.h"
#include "core/error.h"

namespace volt::testing {
namespace {

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// A small state with a distinctive tensor (0xA7 bytes) whose position in the file is easy to find.
StateDict sample_state() {
  StateDict state;
  state.set("int", int64_t{-7});
  state.set("double", 0.125);
  state.set("bool", true);
  state.set("string", std::string("volt"));
  state.set("none", c10::IValue());
  state.set("marker", torch::full({64}, 0xA7, torch::kUInt8));  // not 0x5A: the zip padding is "ZZZ..."
  state.set("floats", torch::arange(12, torch::kFloat).reshape({3, 4}));
  state.set("bf16", torch::linspace(-1, 1, 5).to(torch::kBFloat16));
  state.set("view", torch::arange(20, torch::kLong).reshape({4, 5}).t());  // non-contiguous
  state.set("scalar", torch::scalar_tensor(3.5, torch::kDouble));
  state.set("typed_ints", c10::List<int64_t>({1, 2, 3}));
  state.set("typed_doubles", c10::List<double>({0.5, 1.5}));
  state.set("tuple", c10::ivalue::Tuple::create({0.9, 0.999}));
  StateDict nested;
  nested.set("inner", torch::ones({2}));
  state.set("nested", nested);
  c10::impl::GenericDict by_index(c10::IntType::get(), c10::AnyType::get());
  by_index.insert(int64_t{0}, torch::zeros({1}));
  state.set("by_index", by_index);
  return state;
}

// Whether two states hold the same keys with equal values (tensors: same dtype, shape, values).
bool same(const c10::IValue& a, const c10::IValue& b) {
  if (a.isTensor() || b.isTensor()) {
    return a.isTensor() && b.isTensor() && a.toTensor().dtype() == b.toTensor().dtype() &&
           a.toTensor().sizes() == b.toTensor().sizes() && torch::equal(a.toTensor(), b.toTensor());
  }
  if (a.isGenericDict() || b.isGenericDict()) {
    if (!a.isGenericDict() || !b.isGenericDict() || a.toGenericDict().size() != b.toGenericDict().size()) return false;
    const auto other = b.toGenericDict();
    for (const auto& entry : a.toGenericDict()) {
      auto found = other.find(entry.key());
      if (found == other.end() || !same(entry.value(), found->value())) return false;
    }
    return true;
  }
  if (a.isList() || b.isList()) {
    if (!a.isList() || !b.isList() || a.toListRef().size() != b.toListRef().size()) return false;
    for (size_t i = 0; i < a.toListRef().size(); ++i) {
      if (!same(a.toListRef()[i], b.toListRef()[i])) return false;
    }
    return true;
  }
  if (a.isTuple() || b.isTuple()) {
    if (!a.isTuple() || !b.isTuple()) return false;
    const auto& x = a.toTupleRef().elements();
    const auto& y = b.toTupleRef().elements();
    if (x.size() != y.size()) return false;
    for (size_t i = 0; i < x.size(); ++i) {
      if (!same(x[i], y[i])) return false;
    }
    return true;
  }
  return a == b;
}

std::string checkpoint_error(const std::function<void()>& body) { return error_message_of<CheckpointError>(body); }

TEST(CheckpointFormat, EveryValueTypeSurvivesARoundTrip) {
  TemporaryDirectory dir;
  CheckpointIO io;
  const auto state = sample_state();
  io.save(state, dir.file("a.ckpt"));
  const auto loaded = io.load(dir.file("a.ckpt"));
  EXPECT_TRUE(same(state.to_ivalue(), loaded.to_ivalue()));
  // Typed lists come back as plain lists; the typed accessors read both forms.
  EXPECT_EQ(loaded.get_ints("typed_ints"), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(loaded.get_doubles("typed_doubles"), (std::vector<double>{0.5, 1.5}));
  EXPECT_EQ(loaded.get_string("string"), "volt");
  EXPECT_EQ(loaded.get_int("int"), -7);
}

TEST(CheckpointFormat, EveryFlippedByteIsAnErrorOrChangesNothing) {
  TemporaryDirectory dir;
  CheckpointIO io;
  const auto state = sample_state();
  io.save(state, dir.file("good.ckpt"));
  const std::string good = read_bytes(dir.file("good.ckpt"));
  const auto marker = good.find(std::string(64, static_cast<char>(0xA7)));
  ASSERT_NE(marker, std::string::npos);
  size_t detected = 0;
  for (size_t i = 0; i < good.size(); ++i) {
    std::string bad = good;
    bad[i] = static_cast<char>(bad[i] ^ 0x10);
    write_bytes(dir.file("bad.ckpt"), bad);
    try {
      const auto loaded = io.load(dir.file("bad.ckpt"));
      // Only bytes that carry no content (zip padding, unchecked header fields) may flip unnoticed.
      ASSERT_TRUE(same(state.to_ivalue(), loaded.to_ivalue())) << "a flipped byte at offset " << i << " of "
                                                               << good.size() << " loaded wrong content silently";
    } catch (const CheckpointError&) {
      ++detected;
    }
  }
  EXPECT_GT(detected, good.size() / 2);
  // Inside a tensor record, the checksum is what notices.
  std::string bad = good;
  bad[marker + 10] ^= 0x01;
  write_bytes(dir.file("bad.ckpt"), bad);
  EXPECT_NE(checkpoint_error([&] { io.load(dir.file("bad.ckpt")); }).find("checksum mismatch"), std::string::npos);
}

// The file of an older volt (Note [Reading parts of a checkpoint]): the same archive whose
// integrity record has no per-block CRCs (no pickle_crc32c, block_bytes or block_crc32c_ lines).
void write_without_block_crcs(const std::string& from, const std::string& to) {
  caffe2::serialize::PyTorchStreamReader reader(from);
  std::ofstream out(to, std::ios::binary | std::ios::trunc);
  caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, size_t size) {
    out.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
    return size;
  });
  for (const auto& name : reader.getAllRecords()) {
    // What the writer writes itself.
    if (name == "version" || name == ".data/version" || name == "byteorder" || name == ".data/serialization_id") continue;
    auto [data, size] = reader.getRecord(name);
    std::string bytes(static_cast<const char*>(data.get()), size);
    if (name == kIntegrityRecord) {
      std::istringstream lines(bytes);
      std::string kept;
      for (std::string line; std::getline(lines, line);) {
        if (line.rfind("pickle_crc32c", 0) == 0 || line.rfind("block_", 0) == 0) continue;
        kept += line + "\n";
      }
      EXPECT_NE(kept, bytes) << "the record had block CRCs to remove";
      bytes = kept;
    }
    writer.writeRecord(name, bytes.data(), bytes.size());
  }
  writer.writeEndOfFile();
}

TEST(CheckpointFormat, AFileOfAnOlderVoltWithoutBlockCrcsIsCheckedWhole) {
  TemporaryDirectory dir;
  CheckpointIO io;
  const auto state = sample_state();
  io.save(state, dir.file("new.ckpt"));
  write_without_block_crcs(dir.file("new.ckpt"), dir.file("old.ckpt"));
  EXPECT_TRUE(same(state.to_ivalue(), io.load(dir.file("old.ckpt")).to_ivalue()));
  const auto lazy = io.load_lazily(dir.file("old.ckpt"), {"floats"});
  EXPECT_TRUE(same(state.at("marker"), lazy.content.at("marker")));
  // A flipped byte inside a tensor: the whole file's checksum notices, on both paths.
  std::string bad = read_bytes(dir.file("old.ckpt"));
  const auto marker = bad.find(std::string(64, static_cast<char>(0xA7)));
  ASSERT_NE(marker, std::string::npos);
  bad[marker + 10] ^= 0x01;
  write_bytes(dir.file("old_bad.ckpt"), bad);
  EXPECT_NE(checkpoint_error([&] { io.load(dir.file("old_bad.ckpt")); }).find("checksum mismatch"), std::string::npos);
  EXPECT_NE(checkpoint_error([&] { io.load_lazily(dir.file("old_bad.ckpt"), {"floats"}); }).find("checksum mismatch"),
            std::string::npos);
}

TEST(CheckpointFormat, ATruncatedFileIsAnError) {
  TemporaryDirectory dir;
  CheckpointIO io;
  io.save(sample_state(), dir.file("good.ckpt"));
  const std::string good = read_bytes(dir.file("good.ckpt"));
  for (size_t length : {size_t{0}, size_t{1}, size_t{100}, good.size() / 2, good.size() - 22, good.size() - 1}) {
    write_bytes(dir.file("short.ckpt"), good.substr(0, length));
    const auto message = checkpoint_error([&] { io.load(dir.file("short.ckpt")); });
    EXPECT_NE(message.find("short.ckpt"), std::string::npos) << message;
    EXPECT_NE(message.find("truncated"), std::string::npos) << "length " << length << ": " << message;
  }
}

TEST(CheckpointFormat, AMissingFileIsAnError) {
  TemporaryDirectory dir;
  const auto message = checkpoint_error([&] { CheckpointIO().load(dir.file("absent.ckpt")); });
  EXPECT_NE(message.find("no file at '" + dir.file("absent.ckpt") + "'"), std::string::npos) << message;
}

TEST(CheckpointFormat, AFileThatIsNoCheckpointIsAnError) {
  TemporaryDirectory dir;
  write_bytes(dir.file("notes.ckpt"), "not a checkpoint, just text\n");
  EXPECT_NE(checkpoint_error([&] { CheckpointIO().load(dir.file("notes.ckpt")); }).find("not a readable checkpoint"),
            std::string::npos);
}

TEST(CheckpointFormat, ANewerFormatVersionIsRefusedWithItsNumber) {
  TemporaryDirectory dir;
  {
    std::ofstream out(dir.file("future.ckpt"), std::ios::binary);
    write_checkpoint_archive(sample_state(), [&](const void* data, size_t size) {
      out.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
      return size;
    }, kCheckpointFormatVersion + 1);
  }
  const auto message = checkpoint_error([&] { CheckpointIO().load(dir.file("future.ckpt")); });
  EXPECT_NE(message.find("format version " + std::to_string(kCheckpointFormatVersion + 1) + " by a newer volt"),
            std::string::npos) << message;
}

TEST(CheckpointFormat, ValuesThatAreNotPlainDataAreRefusedOnSave) {
  TemporaryDirectory dir;
  StateDict state;
  state.set("device", c10::IValue(torch::Device(torch::kCPU)));
  EXPECT_NE(checkpoint_error([&] { CheckpointIO().save(state, dir.file("x.ckpt")); }).find("state['device']"),
            std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(dir.file("x.ckpt")));
  EXPECT_TRUE(std::filesystem::is_empty(dir.path())) << "a failed save left a temporary file behind";
}

}  // namespace
}  // namespace volt::testing
