#pragma once
// Note [Which decision]: every rank must run the same collectives in the same order, and Gloo
// and NCCL pair them by sequence number only. A decision (broadcast_decision,
// reduce_boolean_decision) is the collective most often put behind a condition that can differ
// between ranks (a callback reading rank-local state or the disk), and two ranks at different
// decisions exchange a bit of the same shape: each silently takes the other's answer (a rank
// that removed a file answers another rank's "stop fitting?"), and the run goes on out of step.
// So a decision carries where it is taken: its call site (the source file's name without
// directories, which builds at other paths share, and the line); every rank compares its own
// with rank 0's and fails at once, naming both, when they differ.
#include <cstdint>
#include <source_location>
#include <string>

#include "distributed/process_topology.h"

namespace volt {

struct DecisionSite {
  int64_t id = 0;  // a hash of file and line, in [0, 2^62)
  int64_t line = 0;
  std::string file;  // without directories
};

DecisionSite decision_site(const std::source_location& where);

// Throws DistributedError unless `other_id`, the site `other` took the same decision at (line
// `other_line`, -1: unknown), is `mine`. `what`: "broadcast_decision" or
// "reduce_boolean_decision"; `other`: "rank 0" or "another rank".
void check_decision_site(const DecisionSite& mine, int64_t other_id, int64_t other_line, const ProcessTopology& me,
                         const char* what, const char* other);

}  // namespace volt
