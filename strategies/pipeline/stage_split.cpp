#include "strategies/pipeline/stage_split.h"

#include <limits>

#include "core/error.h"

namespace volt::pipeline {

std::vector<int64_t> balanced_stage_starts(const std::vector<int64_t>& parameters, int64_t stages) {
  const auto n = static_cast<int64_t>(parameters.size());
  check<ConfigurationError>(stages >= 1, "pipeline: stages=", stages, "; a pipeline has at least one stage");
  check<ConfigurationError>(n >= stages, "pipeline: stages=", stages, " but the Sequential has ", n,
                            " entries; use at most ", n, " stages, or split the model into more entries");
  std::vector<int64_t> prefix(static_cast<size_t>(n + 1), 0);
  for (int64_t i = 0; i < n; ++i)
    prefix[static_cast<size_t>(i + 1)] = prefix[static_cast<size_t>(i)] + parameters[static_cast<size_t>(i)];
  const auto sum = [&](int64_t a, int64_t b) {
    return prefix[static_cast<size_t>(b)] - prefix[static_cast<size_t>(a)];
  };
  // best[k][i]: the least largest stage over splits of the first i entries into k stages;
  // cut[k][i]: where the last of those k stages starts.
  constexpr int64_t kNone = std::numeric_limits<int64_t>::max();
  std::vector<std::vector<int64_t>> best(static_cast<size_t>(stages + 1),
                                         std::vector<int64_t>(static_cast<size_t>(n + 1), kNone));
  auto cut = best;
  best[0][0] = 0;
  for (int64_t k = 1; k <= stages; ++k) {
    for (int64_t i = k; i <= n; ++i) {
      for (int64_t j = k - 1; j < i; ++j) {  // the k-th stage runs entries [j, i)
        if (best[static_cast<size_t>(k - 1)][static_cast<size_t>(j)] == kNone) continue;
        const int64_t largest = std::max(best[static_cast<size_t>(k - 1)][static_cast<size_t>(j)], sum(j, i));
        if (largest < best[static_cast<size_t>(k)][static_cast<size_t>(i)]) {
          best[static_cast<size_t>(k)][static_cast<size_t>(i)] = largest;
          cut[static_cast<size_t>(k)][static_cast<size_t>(i)] = j;
        }
      }
    }
  }
  std::vector<int64_t> starts(static_cast<size_t>(stages));
  for (int64_t k = stages, i = n; k >= 1; --k) {
    i = cut[static_cast<size_t>(k)][static_cast<size_t>(i)];
    starts[static_cast<size_t>(k - 1)] = i;
  }
  return starts;
}

void check_stage_starts(const std::vector<int64_t>& starts, int64_t entries) {
  check<ConfigurationError>(!starts.empty() && starts.front() == 0, "pipeline: the first stage starts at entry 0; ",
                            "list where every stage starts, beginning with 0");
  for (size_t s = 1; s < starts.size(); ++s) {
    check<ConfigurationError>(starts[s] > starts[s - 1] && starts[s] < entries, "pipeline: stage ", s,
                              " starts at entry ", starts[s], ", after stage ", s - 1, "'s start ", starts[s - 1],
                              " and before the Sequential's end (", entries,
                              " entries) it must; every stage needs at least one entry");
  }
}

torch::nn::Sequential stage_of(const torch::nn::Sequential& sequential, const std::vector<int64_t>& starts,
                               int64_t stage) {
  const auto entries = static_cast<int64_t>(sequential->size());
  check_stage_starts(starts, entries);
  const int64_t begin = starts.at(static_cast<size_t>(stage));
  const int64_t end =
      stage + 1 < static_cast<int64_t>(starts.size()) ? starts[static_cast<size_t>(stage + 1)] : entries;
  torch::nn::Sequential out;
  const auto names = sequential->named_children();
  auto entry = sequential->begin() + begin;
  for (int64_t i = begin; i < end; ++i, ++entry) out->push_back(names[static_cast<size_t>(i)].key(), *entry);
  return out;
}

std::vector<int64_t> entry_parameter_counts(const torch::nn::Sequential& sequential) {
  std::vector<int64_t> counts;
  for (const auto& child : sequential->children()) {
    int64_t count = 0;
    for (const auto& p : child->parameters()) count += p.numel();
    counts.push_back(count);
  }
  return counts;
}

}  // namespace volt::pipeline
