#pragma once
// PyTorch's HierarchicalModelAverager (torch/distributed/algorithms/model_averaging/
// hierarchical_model_averager.py; Zhou et al., "Hierarchical SGD", arXiv:2010.12998): levels of
// groups of growing size, each averaging with its own period. After `warmup_steps`, at step s the
// level with the largest period dividing s averages (PyTorch's test is s % period, not
// (s - warmup) % period as in the periodic averager), and no other: its groups contain the smaller
// levels' groups, so averaging those too would change nothing. The last level is the whole world.
//
// `ddp:comm_hook=post_local_sgd,model_averaging_periods=2:4,8:8`: groups of 4 consecutive ranks
// average every 2 steps, the world of 8 every 8 steps.
#include <string>
#include <vector>

#include "distributed/topology.h"
#include "strategies/averaging/model_averager.h"

namespace volt::averaging {

// One level: the groups of `group_size` consecutive ranks average every `period` steps.
struct AveragingLevel {
  int64_t period = 1;
  int64_t group_size = 1;
  bool operator==(const AveragingLevel&) const = default;
};

// "period:group_size,..." (e.g. "2:4,8:8") and back. parse throws ConfigurationError for
// malformed text; the values are checked by check_averaging_levels.
std::vector<AveragingLevel> parse_averaging_levels(const std::string& text);
std::string format_averaging_levels(const std::vector<AveragingLevel>& levels);

// What holds whatever the world size: at least one level; periods >= 1 and strictly increasing
// (the schedule picks the largest period dividing the step); group sizes >= 1, each dividing the
// next (a level's groups are unions of the previous level's). Throws ConfigurationError.
void check_averaging_levels(const std::vector<AveragingLevel>& levels);
// Also: every group size divides `world_size` and the last one is `world_size`.
void check_averaging_levels(const std::vector<AveragingLevel>& levels, int64_t world_size);

class HierarchicalModelAverager : public ModelAverager {
 public:
  // Takes each level's groups from `topology` (Topology::consecutive_group: the node group or the
  // world where they coincide, otherwise new groups), which must outlive the averager. Throws
  // ConfigurationError for levels check_averaging_levels refuses. [collective over the world]
  HierarchicalModelAverager(Topology& topology, std::vector<AveragingLevel> levels, int64_t warmup_steps);
  std::string name() const override { return "hierarchical model averager"; }

  void average_parameters(const std::vector<torch::Tensor>& parameters) override;  // [collective at averaging steps]
  // The index of the level that averages at `step`, or -1 when none does (the schedule alone).
  int64_t level_at(int64_t step) const;
  const std::vector<AveragingLevel>& levels() const { return levels_; }

 private:
  std::vector<AveragingLevel> levels_;
  std::vector<Communicator*> groups_;  // this process's group of each level
};

}  // namespace volt::averaging
