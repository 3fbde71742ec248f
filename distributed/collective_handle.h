#pragma once
// An in-flight collective (distributed/communicator.h starts them).
#include <torch/torch.h>

#include <functional>
#include <memory>

namespace volt {

// wait() blocks until the collective completes (or fails, or the communicator's timeout passes)
// and returns its result; waiting again returns the same result (or rethrows the same error). A
// default-constructed handle is already complete with an undefined result.
// Not thread-safe: wait on the thread that holds the handle.
class CollectiveHandle {
 public:
  CollectiveHandle() = default;
  // Throws DistributedError (naming rank, collective and cause) on failure or timeout; an
  // exception thrown by a continuation passes through unchanged.
  torch::Tensor wait();
  // Whether wait() would return without blocking. False while a continuation added by
  // then_collective has not run yet (it runs only inside wait()).
  bool is_completed() const;
  // A handle whose result is `continuation(result of this one)`, run on the waiting thread
  // (e.g. decompressing a gradient bucket). Consumes this handle.
  CollectiveHandle then(std::function<torch::Tensor(const torch::Tensor&)> continuation) &&;
  // A handle whose result is that of the collective `continuation(result of this one)` starts:
  // wait() waits for this one, runs the continuation on the waiting thread (it starts the next
  // collective), waits for that, and returns its result (PowerSGD: all_reduce P, orthogonalize,
  // all_reduce Q). See Note [Chained collectives] for the order in which ranks issue them.
  // Consumes this handle.
  CollectiveHandle then_collective(std::function<CollectiveHandle(const torch::Tensor&)> continuation) &&;

  struct State;  // defined where c10d is included (distributed/collective_handle_state.h)
  explicit CollectiveHandle(std::shared_ptr<State> state) : state_(std::move(state)) {}

 private:
  std::shared_ptr<State> state_;
};

}  // namespace volt
