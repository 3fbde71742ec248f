#pragma once
// What DDP's Reducer and ShardedDDP's ShardedReducer have in common for the loop: a backward
// bracketed by prepare_for_backward / finalize_backward synchronizes the gradients, unless
// require_sync is off (no_sync: accumulation micro-batches). ReducerSynchronization drives either
// (reducer_synchronization.h).
#include <torch/torch.h>

namespace volt {

class BackwardReducer {
 public:
  virtual ~BackwardReducer() = default;
  // false inside no_sync(): backward only accumulates locally.
  void set_require_sync(bool require_sync) { require_sync_ = require_sync; }
  bool require_sync() const { return require_sync_; }
  // Before a backward from `loss`. [collective for some reducers]
  virtual void prepare_for_backward(const torch::Tensor& loss) = 0;
  // After it: waits for every reduction and writes the gradients. [collective]
  virtual void finalize_backward() = 0;
  // A window that closed without backward (Note [A window that closes without backward]): reduces
  // the gradients accumulated under no_sync as a synchronized backward would have, on the same
  // path (DDP's comm hook, which counts the iteration; its group, which post-local-SGD's local
  // phase narrows to a subgroup). false: this reducer has no such path, the caller averages.
  // [collective when it returns true]
  virtual bool reduce_accumulated_gradients() { return false; }

 private:
  bool require_sync_ = true;
};

}  // namespace volt
