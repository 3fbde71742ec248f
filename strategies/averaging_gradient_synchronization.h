#pragma once
// The gradients part (gradient_synchronization.h) every ParallelStrategy starts from: backward
// itself synchronizes nothing, and a window that closed without backward (or a strategy without
// a reducer) gets its accumulated gradients averaged over the strategy's gradient group.
#include "strategies/gradient_synchronization.h"
#include "strategies/part_context.h"

namespace volt {


class AveragingGradientSynchronization : public GradientSynchronization {
 public:
  // Averages over `group`'s gradient group (Note [Part context]).
  AveragingGradientSynchronization(const PartContext& context, ProcessGroupContext& group);

  // Averages every trainable parameter's gradient over the gradient group
  // (averaging::replace_by_mean, after one all_reduce that tells which parameters have a gradient
  // on some rank of it: those get one everywhere, the others stay without). [collective]
  void synchronize_accumulated_gradients(torch::nn::Module& module) override;

 private:
  ProcessGroupContext& group_;
};

}  // namespace volt
