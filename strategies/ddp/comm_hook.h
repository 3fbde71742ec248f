#pragma once
// How a gradient bucket is reduced. The Reducer hands every ready bucket to its CommHook, which
// starts the communication and returns an in-flight result; the Reducer waits for it at the end
// of backward and writes the result back into the bucket. Compression (fp16/bf16), PowerSGD and
// post-local-SGD are hooks: a hook owns its typed state, and a transformation of the result is a
// continuation on the handle (CollectiveHandle::then), run on the training thread.
//
// A hook runs on the autograd thread while backward continues; it must issue its collectives in
// bucket order (the Reducer calls it in that order) and the same collectives on every rank.
#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "distributed/communicator.h"

namespace volt::ddp {

// One bucket, as a hook sees it.
struct GradBucket {
  int64_t index = 0;        // position in the reduction order, 0-based
  bool is_last = false;     // the last bucket of this iteration
  torch::Tensor buffer;     // flat gradients of `parameters`, concatenated; the hook may modify it
  std::vector<torch::Tensor> parameters;  // the bucket's parameters, in buffer order
};

class CommHook {
 public:
  virtual ~CommHook() = default;
  virtual std::string name() const = 0;
  // Starts reducing `bucket`; the handle's result is the averaged flat gradient (the bucket's
  // buffer itself or a new tensor of the same shape and dtype). [collective]
  virtual CollectiveHandle run(GradBucket& bucket) = 0;
};

// The default: divide by the world size, then sum over the ranks (PyTorch's allreduce_hook), so
// every rank ends with the mean gradient.
class AllReduceHook : public CommHook {
 public:
  // `communicator` must outlive the hook.
  explicit AllReduceHook(Communicator& communicator) : communicator_(communicator) {}
  std::string name() const override { return "allreduce"; }
  CollectiveHandle run(GradBucket& bucket) override;

 private:
  Communicator& communicator_;
};

}  // namespace volt::ddp
