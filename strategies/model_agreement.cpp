#include "strategies/model_agreement.h"

#include <cstring>
#include <sstream>

#include "core/error.h"

namespace volt {
namespace {

// One line per tensor: "parameter net.0.weight float [16, 8]".
std::vector<std::string> layout_of(torch::nn::Module& module) {
  std::vector<std::string> lines;
  auto describe = [&](const char* kind, const std::string& name, const torch::Tensor& t) {
    std::ostringstream line;
    line << kind << " " << name << " ";
    if (t.defined()) {
      line << t.dtype() << " " << t.sizes();
    } else {
      line << "undefined";
    }
    lines.push_back(line.str());
  };
  for (const auto& item : module.named_parameters()) describe("parameter", item.key(), item.value());
  for (const auto& item : module.named_buffers()) describe("buffer", item.key(), item.value());
  return lines;
}

std::string joined(const std::vector<std::string>& lines) {
  std::string text;
  for (const auto& line : lines) text += line + "\n";
  return text;
}

// FNV-1a, folded to 62 bits so that it survives the trip through an int64 tensor.
int64_t fingerprint(const std::string& text) {
  uint64_t hash = 1469598103934665603ULL;
  for (const unsigned char c : text) {
    hash ^= c;
    hash *= 1099511628211ULL;
  }
  return static_cast<int64_t>(hash >> 2);
}

}  // namespace

void verify_same_model(Communicator& communicator, torch::nn::Module& module) {
  const auto lines = layout_of(module);
  const std::string mine = joined(lines);
  const auto gathered = communicator.all_gather(torch::tensor({fingerprint(mine)}, torch::kLong)).flatten();
  const auto* prints = gathered.data_ptr<int64_t>();
  std::vector<int64_t> differing;
  for (int64_t r = 1; r < communicator.size(); ++r) {
    if (prints[r] != prints[0]) differing.push_back(r);
  }
  if (differing.empty()) return;
  // Rank 0's layout, so that each differing rank can name its first difference.
  auto length = torch::tensor({static_cast<int64_t>(mine.size())}, torch::kLong);
  communicator.broadcast(length, 0);
  auto bytes = torch::zeros({length.item<int64_t>()}, torch::kUInt8);
  if (communicator.rank() == 0) std::memcpy(bytes.data_ptr(), mine.data(), mine.size());
  communicator.broadcast(bytes, 0);
  const std::string theirs(reinterpret_cast<const char*>(bytes.data_ptr()), static_cast<size_t>(bytes.numel()));
  std::string ranks;
  for (const int64_t r : differing) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
  std::string detail;
  if (theirs != mine) {
    std::istringstream rank0(theirs);
    std::string line;
    size_t i = 0;
    while (std::getline(rank0, line) && i < lines.size() && line == lines[i]) ++i;
    detail = "; first difference on this rank (" + std::to_string(communicator.rank()) + "): rank 0 has '" +
             (rank0 ? line : std::string("nothing more")) + "', this rank '" +
             (i < lines.size() ? lines[i] : std::string("nothing more")) + "'";
  }
  throw DistributedError("Model check (rank " + std::to_string(communicator.rank()) + " of " +
                         std::to_string(communicator.size()) + "): the model on rank(s) " + ranks +
                         " differs from rank 0's in its parameters or buffers (names, shapes or dtypes)" + detail +
                         "; every rank must build the same model before training");
}

}  // namespace volt
