#pragma once
// The gradients part (gradient_synchronization.h) every ParallelStrategy starts from: backward
// itself synchronizes nothing, and a window that closed without backward (or a strategy without
// a reducer) gets its accumulated gradients averaged over the strategy's gradient group.
#include "strategies/gradient_synchronization.h"

namespace volt {

class ParallelStrategy;

class AveragingGradientSynchronization : public GradientSynchronization {
 public:
  explicit AveragingGradientSynchronization(ParallelStrategy& owner);

  // Averages every trainable parameter's gradient over the gradient group
  // (averaging::replace_by_mean, after one all_reduce that tells which parameters have a gradient
  // on some rank of it: those get one everywhere, the others stay without). [collective]
  void synchronize_accumulated_gradients(torch::nn::Module& module) override;

 private:
  ParallelStrategy& parallel_owner_;
};

}  // namespace volt
