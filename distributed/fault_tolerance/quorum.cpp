#include "distributed/fault_tolerance/quorum.h"

#include <algorithm>
#include <sstream>

#include "core/error.h"

namespace volt {

int64_t Quorum::index_of(int64_t replica) const {
  for (size_t i = 0; i < members.size(); ++i) {
    if (members[i].replica == replica) return static_cast<int64_t>(i);
  }
  return -1;
}

int64_t Quorum::max_step() const {
  int64_t step = 0;
  for (const auto& member : members) step = std::max(step, member.step);
  return step;
}

std::vector<int64_t> Quorum::sources() const {
  const int64_t top = max_step();
  std::vector<int64_t> out;
  for (const auto& member : members) {
    if (member.step == top && !member.fresh) out.push_back(member.replica);
  }
  if (out.empty()) {
    for (const auto& member : members) {
      if (member.step == top) return {member.replica};
    }
  }
  return out;
}

int64_t Quorum::source_of(int64_t replica) const {
  const auto from = sources();
  if (std::find(from.begin(), from.end(), replica) != from.end()) return -1;
  // Healers are dealt to the sources in turn, so that one source does not send every copy.
  int64_t healer = 0;
  for (const auto& member : members) {
    if (std::find(from.begin(), from.end(), member.replica) != from.end()) continue;
    if (member.replica == replica) return from[static_cast<size_t>(healer) % from.size()];
    ++healer;
  }
  return -1;
}

std::vector<int64_t> Quorum::healers_of(int64_t replica) const {
  std::vector<int64_t> out;
  for (const auto& member : members) {
    if (source_of(member.replica) == replica) out.push_back(member.replica);
  }
  return out;
}

std::string Quorum::encode() const {
  std::ostringstream text;
  text << "quorum " << id << " " << generation << " " << members.size();
  for (const auto& member : members) text << " " << member.replica << " " << member.step << " " << member.fresh;
  return text.str();
}

Quorum Quorum::decode(const std::string& text, const std::string& what) {
  std::istringstream in(text);
  std::string word;
  Quorum quorum;
  size_t count = 0;
  in >> word >> quorum.id >> quorum.generation >> count;
  check<DistributedError>(in && word == "quorum", what, ": expected a quorum, got '", text, "'");
  for (size_t i = 0; i < count; ++i) {
    QuorumMember member;
    in >> member.replica >> member.step >> member.fresh;
    check<DistributedError>(static_cast<bool>(in), what, ": a quorum of ", count, " members lists fewer: '", text, "'");
    quorum.members.push_back(member);
  }
  return quorum;
}

QuorumBatches batches_of_step(const Quorum& quorum, int64_t replica, int64_t first, int64_t epoch_batches) {
  const int64_t members = static_cast<int64_t>(quorum.members.size());
  QuorumBatches out;
  out.trained = std::clamp<int64_t>(epoch_batches - first, 0, members);
  const int64_t index = quorum.index_of(replica);
  if (index >= 0 && index < out.trained) out.mine = first + index;
  return out;
}

}  // namespace volt
