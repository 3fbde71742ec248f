// volt-ckpt: looks at, checks and converts volt checkpoints without training anything.
//   volt-ckpt inspect PATH        layout, strategy, world size, step, epoch, sections, tensors
//   volt-ckpt verify PATH         every file's checksum; a sharded directory's every shard, of one save
//   volt-ckpt convert PATH OUT    a sharded checkpoint (directory) into one full checkpoint file
//   volt-ckpt convert FILE OUT --ranks N
//                                 a full checkpoint file into a sharded directory for N ranks
//                                 (Note [A full checkpoint sharded for N ranks])
//   volt-ckpt export PATH OUT     the weights alone: model.load_state_dict(torch.load(OUT)) in PyTorch
// PATH is a full checkpoint file or a sharded checkpoint directory. Errors go to stderr, naming
// the file and what is wrong; the exit status is 1 for a bad checkpoint, 2 for a bad command line.
// Nothing is written over unless the whole output is ready (OUT is written atomically).
#include <torch/torch.h>

#include <filesystem>
#include <iomanip>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_io.h"
#include "checkpoint/shard_full_checkpoint.h"
#include "checkpoint/sharded_checkpoint.h"
#include "core/error.h"

namespace fs = std::filesystem;
using volt::CheckpointError;
using volt::CheckpointIO;
using volt::StateDict;

namespace {

const char* kUsage =
    "usage: volt-ckpt inspect PATH\n"
    "       volt-ckpt verify PATH\n"
    "       volt-ckpt convert PATH OUT   (a sharded checkpoint directory into one full checkpoint file)\n"
    "       volt-ckpt convert FILE OUT --ranks N\n"
    "                                    (a full checkpoint file into a sharded checkpoint directory for N ranks)\n"
    "       volt-ckpt export PATH OUT    (the weights alone, for model.load_state_dict(torch.load(OUT)))\n"
    "PATH: a checkpoint file, or a sharded checkpoint's directory\n";

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Loaded {
  StateDict full;       // the checkpoint in the full layout (shards put together)
  int64_t files = 1;    // files read (each verified)
  bool sharded = false;
};

// `verify_only`: each shard file is read and verified whole, once (putting together reads only the
// blocks the full checkpoint holds: not a flat's padding), and the shards are put together without
// reading their tensors again: the full checkpoint returned holds placeholders.
Loaded load_any(const fs::path& path, bool verify_only = false) {
  std::error_code error;
  volt::check<CheckpointError>(fs::exists(path, error), "'", path.string(), "' does not exist");
  CheckpointIO io;
  if (!fs::is_directory(path, error)) return {io.load(path), 1, false};
  if (verify_only) volt::read_shards(io, path);
  const volt::ShardedCheckpoint sharded(io, path);
  return {verify_only ? sharded.full() : sharded.materialize(sharded.full()), sharded.shards(), true};
}

std::string human_bytes(int64_t bytes) {
  std::ostringstream text;
  text << std::fixed << std::setprecision(1);
  if (bytes >= (int64_t{1} << 30)) {
    text << static_cast<double>(bytes) / static_cast<double>(int64_t{1} << 30) << " GiB";
  } else if (bytes >= (int64_t{1} << 20)) {
    text << static_cast<double>(bytes) / static_cast<double>(int64_t{1} << 20) << " MiB";
  } else if (bytes >= 1024) {
    text << static_cast<double>(bytes) / 1024.0 << " KiB";
  } else {
    return std::to_string(bytes) + " B";
  }
  return text.str();
}

int64_t tensor_bytes(const c10::IValue& value) {
  if (value.isTensor()) return value.toTensor().numel() * static_cast<int64_t>(value.toTensor().element_size());
  int64_t bytes = 0;
  if (value.isGenericDict()) {
    for (const auto& entry : value.toGenericDict()) bytes += tensor_bytes(entry.value());
  } else if (value.isList()) {
    for (const auto& item : value.toListRef()) bytes += tensor_bytes(item);
  }
  return bytes;
}

void inspect(const fs::path& path) {
  const Loaded loaded = load_any(path);
  const StateDict& c = loaded.full;
  std::cout << "checkpoint: " << path.string() << "\n";
  std::cout << "layout: "
            << (loaded.sharded ? "sharded, " + std::to_string(loaded.files) + " shards" : std::string("full")) << "\n";
  if (c.contains("format_version")) {
    std::cout << "format_version: " << c.get_int("format_version")
              << (c.contains("volt_version") ? " (volt " + c.get_string("volt_version") + ")" : std::string()) << "\n";
  } else {
    std::cout << "format_version: none (not written by volt: a plain torch.save dict)\n";
  }
  if (c.contains("strategy")) {
    const auto strategy = c.child("strategy");
    std::cout << "strategy: " << strategy.get_string("name") << ", world size " << strategy.get_int("world_size")
              << "\n";
  }
  if (c.contains("epoch")) std::cout << "epoch: " << c.get_int("epoch") << "\n";
  if (c.contains("global_step")) std::cout << "global_step: " << c.get_int("global_step") << "\n";
  if (c.contains("weights_only"))
    std::cout << "weights_only: " << (c.get_bool("weights_only") ? "true" : "false") << "\n";
  std::cout << "sections:";
  for (const auto& key : c.keys()) std::cout << " " << key;
  std::cout << "\n";
  const bool checkpoint = c.contains("state_dict") && c.at("state_dict").isGenericDict();
  const StateDict weights = checkpoint ? c.child("state_dict") : c;
  int64_t total = 0;
  std::ostringstream rows;
  for (const auto& name : weights.keys()) {
    const auto value = weights.at(name);
    if (!value.isTensor()) continue;
    const auto& t = value.toTensor();
    const int64_t bytes = tensor_bytes(value);
    total += bytes;
    rows << "  " << name << "  " << c10::toString(t.scalar_type()) << " " << t.sizes() << "  " << human_bytes(bytes)
         << "\n";
  }
  std::cout << "tensors" << (checkpoint ? " (state_dict)" : "") << ": " << weights.size() << ", "
            << human_bytes(total) << "\n"
            << rows.str();
  if (c.contains("optimizer_states")) {
    const auto& optimizers = c.at("optimizer_states").toListRef();
    for (size_t i = 0; i < optimizers.size(); ++i) {
      const auto state = StateDict::from_ivalue(optimizers[i], "optimizer");
      const size_t parameters = state.contains("state") ? state.at("state").toGenericDict().size() : 0;
      std::cout << "optimizer " << i << ": state for " << parameters << " parameters, "
                << human_bytes(tensor_bytes(optimizers[i])) << "\n";
    }
  }
}

void verify(const fs::path& path) {
  const Loaded loaded = load_any(path, /*verify_only=*/true);  // every checksum, every shard and the index checked
  std::cout << "OK: " << path.string() << ": " << loaded.files << (loaded.files == 1 ? " file" : " files")
            << " verified (checksums" << (loaded.sharded ? ", every shard present and of one save, put together" : "")
            << ")\n";
}

// The directory OUT appears complete or not at all: the shards are written into a hidden sibling
// first, which is then renamed. An existing OUT is not written over.
void shard(const fs::path& path, const fs::path& out, int64_t ranks) {
  std::error_code error;
  volt::check<CheckpointError>(!fs::exists(out, error), "'", out.string(),
                               "' exists; name a new directory for the sharded checkpoint (nothing was written)");
  CheckpointIO io;
  std::vector<std::string> notes;
  const auto shards = volt::shard_full_checkpoint(io.load(path), ranks, &notes);
  std::string hidden(1, '.');  // built by appending: GCC 12 warns falsely on "." + std::string
  hidden += out.filename().string();
  hidden += ".tmp";
  const fs::path temporary = out.parent_path() / hidden;
  fs::remove_all(temporary, error);
  try {
    for (size_t r = 0; r < shards.size(); ++r) io.save(shards[r], volt::shard_file(temporary, static_cast<int64_t>(r)));
    fs::rename(temporary, out);
  } catch (...) {
    fs::remove_all(temporary, error);
    throw;
  }
  std::cout << "wrote " << out.string() << ": the sharded checkpoint of " << path.string() << " for " << ranks
            << " ranks\n";
  for (const auto& line : notes) std::cout << "note: " << line << "\n";
}

void convert(const fs::path& path, const fs::path& out, std::optional<int64_t> ranks) {
  std::error_code error;
  if (!fs::is_directory(path, error)) {
    volt::check<CheckpointError>(fs::exists(path, error), "'", path.string(), "' does not exist");
    if (!ranks) {
      throw UsageError("'" + path.string() + "' is a full checkpoint already; to shard it for N ranks, add --ranks N");
    }
    if (*ranks < 1) throw UsageError("--ranks must be 1 or more, got " + std::to_string(*ranks));
    shard(path, out, *ranks);
    return;
  }
  if (ranks) throw UsageError("--ranks shards a full checkpoint file; '" + path.string() + "' is sharded already");
  const Loaded loaded = load_any(path);
  CheckpointIO().save(loaded.full, out);
  std::cout << "wrote " << out.string() << ": the full checkpoint of the " << loaded.files << " shards of "
            << path.string() << "\n";
}

void export_weights(const fs::path& path, const fs::path& out) {
  const Loaded loaded = load_any(path);
  const StateDict& c = loaded.full;
  volt::check<CheckpointError>(c.contains("state_dict") && c.at("state_dict").isGenericDict(), path.string(),
                               ": no 'state_dict' section: not a volt checkpoint (a weights file is exported already)");
  const auto weights = c.child("state_dict");
  CheckpointIO().save(weights, out);
  std::cout << "wrote " << out.string() << ": " << weights.size() << " tensors, "
            << human_bytes(tensor_bytes(weights.to_ivalue())) << " (model.load_state_dict(torch.load(path)))\n";
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  try {
    if (args.empty() || args[0] == "--help" || args[0] == "-h") {
      std::cout << kUsage;
      return args.empty() ? 2 : 0;
    }
    std::vector<std::string> positional;
    std::optional<int64_t> ranks;
    for (size_t i = 0; i < args.size(); ++i) {
      if (args[i] != "--ranks") {
        positional.push_back(args[i]);
        continue;
      }
      if (i + 1 >= args.size()) throw UsageError("--ranks takes a number");
      try {
        size_t used = 0;
        ranks = std::stoll(args[i + 1], &used);
        if (used != args[i + 1].size()) throw std::invalid_argument("trailing characters");
      } catch (const std::logic_error&) {
        throw UsageError("--ranks takes a number, got '" + args[i + 1] + "'");
      }
      ++i;
    }
    const std::string& command = positional.empty() ? args[0] : positional[0];
    if (ranks && command != "convert") throw UsageError("--ranks belongs to convert");
    const size_t needed = command == "inspect" || command == "verify" ? 2 : 3;
    if ((command != "inspect" && command != "verify" && command != "convert" && command != "export") ||
        positional.size() != needed) {
      throw UsageError(command == "inspect" || command == "verify" || command == "convert" || command == "export"
                           ? "'" + command + "' takes " + std::to_string(needed - 1) + " path(s)"
                           : "unknown command '" + command + "'");
    }
    if (command == "inspect") inspect(positional[1]);
    if (command == "verify") verify(positional[1]);
    if (command == "convert") convert(positional[1], positional[2], ranks);
    if (command == "export") export_weights(positional[1], positional[2]);
    return 0;
  } catch (const UsageError& e) {
    std::cerr << "volt-ckpt: " << e.what() << "\n" << kUsage;
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "volt-ckpt: " << e.what() << "\n";
    return 1;
  }
}
