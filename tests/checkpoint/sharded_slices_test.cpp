// Reading parts of checkpoints (Note [Reading parts of a checkpoint], Note [Reading a sharded
// checkpoint anywhere]): a lazily read file leaves its tensors in the file and verifies each block
// it reads; a sharded checkpoint's slice costs the bytes of that slice (plus at most a block on
// each side of each piece), not the whole model.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>

#include "checkpoint/checkpoint_format.h"
#include "checkpoint/checkpoint_io.h"
#include "checkpoint/sharded_checkpoint.h"
#include "core/error.h"
#include "tests/support/test_support.h"

namespace volt::testing {
namespace {

namespace fs = std::filesystem;

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

TEST(LazyCheckpointFile, LeavesTheChosenSectionsTensorsInTheFileAndVerifiesEachBlockItReads) {
  TemporaryDirectory dir;
  const auto path = fs::path(dir.path()) / "lazy.ckpt";
  const auto values = torch::arange(3 * int64_t{kCheckpointBlockBytes} / 4, torch::kFloat);  // 3 blocks
  StateDict model;
  model.set("weight", values);
  model.set("view", torch::arange(20, torch::kLong).reshape({4, 5}).t());  // not contiguous: read at once
  StateDict state;
  state.set("model", model);
  state.set("other", torch::ones({3}));
  CheckpointIO io;
  io.save(state, path);

  const auto lazy = io.load_lazily(path, {"model"});
  const auto weight = lazy.content.child("model").get_tensor("weight");
  EXPECT_TRUE(weight.is_meta());
  EXPECT_EQ(weight.sizes(), values.sizes());
  ASSERT_EQ(lazy.placeholders.count(weight.unsafeGetTensorImpl()), 1u);
  EXPECT_TRUE(torch::equal(lazy.content.child("model").get_tensor("view"),
                           torch::arange(20, torch::kLong).reshape({4, 5}).t()));
  EXPECT_TRUE(torch::equal(lazy.content.get_tensor("other"), torch::ones({3})));

  const auto& where = lazy.placeholders.at(weight.unsafeGetTensorImpl());
  const auto read = [&](int64_t begin, int64_t count) {
    auto out = torch::empty({count});
    where.file->read(where.record, where.byte_offset + static_cast<uint64_t>(begin) * 4, static_cast<uint64_t>(count) * 4,
                     out.data_ptr());
    return out;
  };
  const uint64_t before = where.file->bytes_read();
  const int64_t begin = int64_t{kCheckpointBlockBytes} / 4 + 10;  // inside the second block
  EXPECT_TRUE(torch::equal(read(begin, 100), values.narrow(0, begin, 100)));
  EXPECT_EQ(where.file->bytes_read() - before, kCheckpointBlockBytes) << "the one block holding the slice";

  // A flipped byte in the third block: a slice of the second still reads, one of the third fails.
  auto bytes = read_bytes(path);
  const std::string marker(reinterpret_cast<const char*>(values.narrow(0, 2 * int64_t{kCheckpointBlockBytes} / 4 + 5, 1).data_ptr()), 4);
  const auto at = bytes.find(marker, 2 * kCheckpointBlockBytes);
  ASSERT_NE(at, std::string::npos);
  bytes[at] ^= 0x10;
  write_bytes(path, bytes);
  const auto damaged = io.load_lazily(path, {"model"});
  const auto& damaged_where = damaged.placeholders.begin()->second;
  auto out = torch::empty({100});
  damaged_where.file->read(damaged_where.record, damaged_where.byte_offset + static_cast<uint64_t>(begin) * 4, 400,
                           out.data_ptr());
  EXPECT_TRUE(torch::equal(out, values.narrow(0, begin, 100)));
  try {
    damaged_where.file->read(damaged_where.record, damaged_where.byte_offset + 2 * kCheckpointBlockBytes, 400,
                             out.data_ptr());
    ADD_FAILURE() << "expected a checksum mismatch";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("checksum mismatch in block 2"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(path.string()), std::string::npos) << e.what();
  }
}

// Two shards of one flat of three parameters (48 MB, so that a slice is large next to the
// verification blocks), as fsdp on 2 ranks writes them.
struct TwoShards {
  std::vector<std::string> names{"a", "b", "c"};
  std::vector<torch::Tensor> values{torch::randn({3000, 1000}), torch::randn({6000000}), torch::randn({3000, 1000})};
  std::vector<std::vector<int64_t>> shapes{{3000, 1000}, {6000000}, {3000, 1000}};
  std::vector<int64_t> offsets{0, 3000000, 9000000};
  int64_t numel = 12000000;
};

void write_shards(const TwoShards& model, const fs::path& directory) {
  auto flat = torch::cat({model.values[0].reshape({-1}), model.values[1], model.values[2].reshape({-1})});
  CheckpointIO io;
  for (int64_t rank = 0; rank < 2; ++rank) {
    const int64_t shard_numel = model.numel / 2;
    FlatShardIndex index{"flat_shard", model.numel, rank * shard_numel, shard_numel, model.names, model.shapes,
                         model.offsets};
    StateDict checkpoint, shard, strategy, state_dict;
    shard.set("rank", rank);
    shard.set("world_size", int64_t{2});
    strategy.set("name", std::string("fsdp"));
    state_dict.set("flat_shard", flat.narrow(0, rank * shard_numel, shard_numel).clone());
    state_dict.set("buffer", torch::full({4}, 7.0));
    checkpoint.set("shard", shard);
    checkpoint.set("strategy", strategy);
    checkpoint.set("state_dict", state_dict);
    checkpoint.set("global_step", int64_t{3});
    checkpoint.set("shard_index", shard_index({index}, {}));
    io.save(checkpoint, shard_file(directory, rank));
  }
}

class ShardedSlices : public ::testing::Test {
 protected:
  ShardedSlices() { write_shards(model, dir.path()); }
  TemporaryDirectory dir;
  const TwoShards model;
  CheckpointIO io;
};

TEST_F(ShardedSlices, ASliceReadsItsBytesAndNoMore) {
  const ShardedCheckpoint sharded(io, dir.path());
  const auto state = sharded.full().child("state_dict");
  EXPECT_EQ(sharded.bytes_read(), 0u) << "opening reads no tensor of the model";
  for (size_t i = 0; i < model.names.size(); ++i) {
    const auto placeholder = state.get_tensor(model.names[i]);
    ASSERT_TRUE(sharded.is_placeholder(placeholder)) << model.names[i];
    EXPECT_EQ(placeholder.sizes(), model.values[i].sizes());
  }

  // The slices of 3 ranks over the same flat, as fsdp on 3 ranks reads them.
  const auto& offsets = model.offsets;
  const int64_t slice = (model.numel + 2) / 3;
  for (int64_t rank = 0; rank < 3; ++rank) {
    const ShardedCheckpoint opened(io, dir.path());  // each rank opens its own
    const auto placeholders = opened.full().child("state_dict");
    const uint64_t before = opened.bytes_read();
    int64_t payload = 0, pieces = 0;
    const int64_t lo = rank * slice, hi = std::min(lo + slice, model.numel);
    for (size_t i = 0; i < model.names.size(); ++i) {
      const int64_t numel = model.values[i].numel();
      const int64_t begin = std::max(lo, offsets[i]), end = std::min(hi, offsets[i] + numel);
      if (begin >= end) continue;
      auto out = torch::empty({end - begin});
      opened.read(placeholders.get_tensor(model.names[i]), begin - offsets[i], out);
      EXPECT_TRUE(torch::equal(out, model.values[i].reshape({-1}).narrow(0, begin - offsets[i], end - begin)))
          << "rank " << rank << ", " << model.names[i];
      payload += (end - begin) * 4;
      // A piece per shard the range crosses (the flat's boundary between the shards is at 6M).
      pieces += (begin < 6000000 && end > 6000000) ? 2 : 1;
    }
    const uint64_t read = opened.bytes_read() - before;
    EXPECT_GE(read, static_cast<uint64_t>(payload)) << "rank " << rank;
    EXPECT_LE(read, static_cast<uint64_t>(payload) + 2 * kCheckpointBlockBytes * static_cast<uint64_t>(pieces))
        << "rank " << rank << " read more than its slice and a block on each side of each piece";
    EXPECT_LT(read, static_cast<uint64_t>(model.numel) * 4 / 2) << "rank " << rank << " read half the model or more";
  }

  const auto full = sharded.materialize(sharded.full());
  for (size_t i = 0; i < model.names.size(); ++i) {
    EXPECT_TRUE(torch::equal(full.child("state_dict").get_tensor(model.names[i]), model.values[i])) << model.names[i];
  }
  EXPECT_TRUE(torch::equal(full.child("state_dict").get_tensor("buffer"), torch::full({4}, 7.0)));
}

TEST_F(ShardedSlices, APlaceholderCannotBeUsedAsValues) {
  const ShardedCheckpoint sharded(io, dir.path());
  auto into = torch::empty({3000, 1000});
  EXPECT_ANY_THROW(into.copy_(sharded.full().child("state_dict").get_tensor("a")));
}

// A CheckpointIO that stores elsewhere and overrides load() alone (here: the files under another
// name). Putting the shards together goes through its load(), never to the local path of the
// shard (which holds no checkpoint here): read whole, nothing left in a file.
class RenamingCheckpointIO : public CheckpointIO {
 public:
  StateDict load(const fs::path& path) override {
    ++loads;
    return CheckpointIO::load(path.string() + ".moved");
  }
  int loads = 0;
};

TEST_F(ShardedSlices, AnIOThatOverridesOnlyLoadIsReadThroughIt) {
  for (int64_t rank = 0; rank < 2; ++rank) {
    fs::rename(shard_file(dir.path(), rank), shard_file(dir.path(), rank).string() + ".moved");
  }
  std::ofstream(shard_file(dir.path(), 0)).put('x');  // what the local path holds: not a checkpoint
  std::ofstream(shard_file(dir.path(), 1)).put('x');
  RenamingCheckpointIO renaming;
  const ShardedCheckpoint sharded(renaming, dir.path());
  EXPECT_EQ(renaming.loads, 2);
  const auto state = sharded.full().child("state_dict");
  for (size_t i = 0; i < model.names.size(); ++i) {
    auto out = torch::empty({10});
    sharded.read(state.get_tensor(model.names[i]), 5, out);
    EXPECT_TRUE(torch::equal(out, model.values[i].reshape({-1}).narrow(0, 5, 10))) << model.names[i];
  }
  const auto full = sharded.materialize(sharded.full());
  for (size_t i = 0; i < model.names.size(); ++i) {
    EXPECT_TRUE(torch::equal(full.child("state_dict").get_tensor(model.names[i]), model.values[i])) << model.names[i];
  }
  EXPECT_EQ(sharded.bytes_read(), 0u) << "nothing read lazily from a file";
}

}  // namespace
}  // namespace volt::testing
