#include "strategies/decision_site.h"

#include "core/error.h"

namespace volt {

DecisionSite decision_site(const std::source_location& where) {
  DecisionSite site;
  site.file = where.file_name();
  if (const auto slash = site.file.find_last_of("/\\"); slash != std::string::npos) site.file.erase(0, slash + 1);
  site.line = static_cast<int64_t>(where.line());
  // FNV-1a: the same number in every process, whatever the standard library's std::hash does.
  uint64_t hash = 14695981039346656037ull;
  for (const char c : site.file + ":" + std::to_string(site.line)) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 1099511628211ull;
  }
  site.id = static_cast<int64_t>(hash >> 2);
  return site;
}

void check_decision_site(const DecisionSite& mine, int64_t other_id, int64_t other_line, const ProcessTopology& me,
                         const char* what, const char* other) {
  check<DistributedError>(
      other_id == mine.id, "ranks out of step: global rank ", me.global_rank, " of ", me.world_size, " took a ", what,
      " at ", mine.file, ":", mine.line, " while ", other, " took its ", what, " elsewhere",
      other_line >= 0 ? " (at line " + std::to_string(other_line) + " of its source file)" : std::string(),
      ". The ranks have run different collectives: one of them sits behind a condition that "
      "differs between ranks (rank-local state, the disk, a clock); decide such conditions on rank 0 "
      "(broadcast_decision) so that every rank calls the same collectives in the same order");
}

}  // namespace volt
