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

#include "core/state_dict.h"
#include "distributed/communicator.h"

namespace volt::ddp {

// One bucket, as a hook sees it.
struct GradBucket {
  int64_t index = 0;        // position in the reduction order, 0-based
  bool is_last = false;     // the last bucket of this iteration
  // Synchronized iterations the Reducer completed before this one (0 in the first). Backwards
  // inside no_sync never reach a hook and never count, so a hook can schedule by it (PowerSGD's
  // start_powersgd_iter) and stay in step across ranks and across a checkpoint resume.
  int64_t iteration = 0;
  torch::Tensor buffer;     // flat gradients of `parameters`, concatenated; the hook may modify it
  std::vector<torch::Tensor> parameters;  // the bucket's parameters, in buffer order
};

// Views of `bucket.buffer` shaped like each of its parameters, in buffer order (PyTorch's
// GradBucket.gradients()): writing to them writes the buffer.
std::vector<torch::Tensor> gradient_views(const GradBucket& bucket);

// Which parameters share each bucket (the Reducer's bucket_layout()).
struct BucketLayout {
  std::vector<std::vector<size_t>> members;  // per bucket, parameter indices in buffer order
  std::vector<int64_t> numel;                // per bucket, elements of its flat buffer
  size_t num_buckets() const { return members.size(); }
};

// A hook is called on the autograd thread (run) and on the training thread (everything else),
// never both at once. Chaining a second collective onto the first (then_collective) is how a
// hook does several rounds; Note [Chained collectives] says why that stays in order.
class CommHook {
 public:
  virtual ~CommHook() = default;
  virtual std::string name() const = 0;
  // Starts reducing `bucket`; the handle's result is the averaged flat gradient (the bucket's
  // buffer itself or a new tensor of the same shape and dtype). [collective]
  virtual CollectiveHandle run(GradBucket& bucket) = 0;

  // This rank's state for a checkpoint (error feedback, counters), nested in the Reducer's
  // state_dict(); empty by default. It may differ per rank (distributed/state_gather.h).
  virtual StateDict state_dict() const { return {}; }
  virtual void load_state_dict(const StateDict& state) {}
  // The Reducer replaced its buckets: after the first synchronized iteration (Note [Rebuilt
  // buckets]) or when loading a state with rebuilt ones. State kept per bucket index belongs to
  // the old layout. Called on the training thread, between iterations.
  virtual void on_buckets_rebuilt(const BucketLayout& layout) {}
};

// The default: divide by the world size, then sum over the ranks (PyTorch's allreduce_hook), so
// every rank ends with the mean gradient. Through shared memory (Communicator::
// reduces_through_shared_memory) it asks for ReduceOp::Mean instead, which divides each element
// once, where it is summed (Note [Collectives through shared memory]): the same bits for a world
// size that is a power of two (dividing by one is exact, barring subnormals), one pass over the
// bucket fewer on every rank.
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
