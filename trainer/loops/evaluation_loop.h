#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/run_stage.h"
#include "data/data_loader.h"
#include "trainer/loops/loop_context.h"
#include "trainer/loops/loop_state.h"

namespace volt {


// One pass over an evaluation loader (validation, sanity check, test, predict): the module in
// eval mode without autograd, each batch through the strategy (batch_to_device, run_step), epoch
// metrics aggregated (and synced across ranks where logged with sync_dist) at the end.
class EvaluationLoop {
 public:
  // `max_batches` caps the number of batches (-1: the stage's limit_*_batches applies).
  // `loader` is the loader as the strategy distributed it.
  EvaluationLoop(const LoopContext& context, RunningStage stage, std::shared_ptr<DataLoader> loader,
                 int64_t max_batches = -1);
  // Validation/test/sanity check: returns the epoch metrics (empty for the sanity check, whose
  // metrics are discarded).
  std::map<std::string, double> run();
  // Predict: predict_step's output for every batch, in order.
  std::vector<torch::Tensor> predict();

  int64_t num_batches() const { return num_batches_; }

 private:
  Trainer& trainer_;  // the LoopContext's, for the hooks
  Strategy& strategy_;
  LoopState& state_;
  RunningStage stage_;
  std::shared_ptr<DataLoader> loader_;
  int64_t num_batches_;
};

}  // namespace volt
