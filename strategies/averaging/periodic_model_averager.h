#pragma once
// PyTorch's PeriodicModelAverager (torch/distributed/algorithms/model_averaging/averagers.py): after
// `warmup_steps` optimizer steps, the parameters are averaged over one group every `period` steps,
// starting with step `warmup_steps` itself (0-based): at step s when s >= warmup_steps and
// (s - warmup_steps) % period == 0. With post-local-SGD, warmup_steps is the hook's
// start_local_sgd_iter, so the first local step ends with an average.
#include "distributed/communicator.h"
#include "strategies/averaging/model_averager.h"

namespace volt::averaging {

class PeriodicModelAverager : public ModelAverager {
 public:
  // `group` (usually the world) must outlive the averager. Throws ConfigurationError for period < 1
  // or warmup_steps < 0.
  PeriodicModelAverager(Communicator& group, int64_t period, int64_t warmup_steps);
  std::string name() const override { return "periodic model averager"; }

  void average_parameters(const std::vector<torch::Tensor>& parameters) override;  // [collective at averaging steps]
  // Whether the parameters are averaged at `step` (the schedule alone).
  bool averages_at(int64_t step) const;
  int64_t period() const { return period_; }

 private:
  Communicator& group_;
  int64_t period_;
};

}  // namespace volt::averaging
