#pragma once
// DDP's gradient synchronization, overlapped with backward (the design of PyTorch's
// c10d::Reducer, written afresh: its headers do not compile against Debian's LibTorch).
//
//   prepare_for_backward(loss)   before backward: rebuild buckets if due, mark parameters known
//                                to be unused as ready
//   (autograd)                   each parameter's gradient accumulator fires a post hook →
//                                the parameter is ready → its bucket, once complete and every
//                                earlier bucket launched, goes to the comm hook (async)
//   finalize_backward()          after backward: reduce whatever is left, wait for every bucket
//                                in order, leave the averaged gradients in .grad, rethrow errors
//
// The parts: buckets/bucket_assignment (who shares a bucket), gradient_bucket (flat buffers and
// views), buckets/readiness_tracker (what is ready, what may launch; shared with ShardedDDP's
// reducer), comm_hook (how a bucket is reduced),
// unused_parameters (graph search), static_graph (first-iteration record).
//
// Ownership: holds the parameters' gradient accumulators (so that autograd keeps using the ones
// carrying its hooks) and removes its hooks on destruction. `communicator` must outlive it.
// Thread safety: the hooks run on the autograd thread while the training thread is inside
// backward; everything else is called from the training thread. Exceptions raised in hooks are
// kept and rethrown by finalize_backward() on the training thread.
#include <torch/torch.h>

#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/state_dict.h"
#include "distributed/communicator.h"
#include "strategies/backward_reducer.h"
#include "strategies/buckets/bucket_assignment.h"
#include "strategies/ddp/comm_hook.h"
#include "strategies/ddp/gradient_bucket.h"
#include "strategies/buckets/readiness_tracker.h"
#include "strategies/ddp/static_graph.h"

namespace torch::autograd {
struct Node;
}

namespace volt::ddp {

struct ReducerOptions {
  // Cap of a bucket in MiB (PyTorch's default 25); > 0. The first bucket of each dtype/device
  // holds at most min(1 MiB, this), so that communication starts early in backward.
  double bucket_cap_mb = 25.0;
  // Search the autograd graph before each synchronized backward for parameters that will get no
  // gradient and reduce their buckets anyway. Off: such an iteration fails naming them.
  bool find_unused_parameters = false;
  // Every iteration uses the same parameters the same number of times (StaticGraphRecord).
  bool static_graph = false;
  // Gradients are views into the bucket buffers: no copies, one copy of the gradients' memory.
  bool gradient_as_bucket_view = false;

  buckets::BucketLimits limits() const;
  // Throws ConfigurationError naming the option, the value and what is allowed.
  void validate() const;
};

// What a listener sees (tests observe overlap and order through it).
enum class ReducerEvent {
  GradientReady,   // value: parameter index
  BucketLaunched,  // value: bucket index
  BucketsRebuilt,  // value: number of buckets
};

// What the comm hook sent in the last synchronized iteration, against the plain all-reduce of the
// same buckets (the hook's compression ratio is hook_bytes / bucket_bytes). Payload bytes, as the
// Communicator counts them.
struct HookTraffic {
  int64_t hook_bytes = 0;    // bytes the hook handed to collectives
  int64_t bucket_bytes = 0;  // bytes of the gradient buckets in their own dtype
};

class Reducer : public BackwardReducer {
 public:
  // `parameters` (dense, requiring grad) and their `names` (for messages), in registration order.
  Reducer(std::vector<torch::Tensor> parameters, std::vector<std::string> names, Communicator& communicator,
          ReducerOptions options);
  ~Reducer();
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  // Replaces the default AllReduceHook. Call between iterations.
  void set_comm_hook(std::unique_ptr<CommHook> hook);
  const CommHook& comm_hook() const { return *hook_; }

  // Before a backward from `loss`. [collective: the first call after the first synchronized
  // iteration broadcasts rank 0's gradient order to rebuild the buckets]
  void prepare_for_backward(const torch::Tensor& loss) override;
  // After that backward: waits for every bucket's reduction and writes the averaged gradients.
  // Throws ConfigurationError for parameters that got no gradient (without
  // find_unused_parameters), after completing the reductions so that no peer hangs; rethrows
  // exceptions raised in hooks. Throws InternalError when no parameter got a gradient at all
  // (Note [Replaced gradient accumulators]). [collective]
  void finalize_backward() override;
  // A synchronized iteration without backward: every parameter's accumulated gradient goes
  // through the comm hook (bucket by bucket, the iteration counted as finalize_backward counts
  // it); a parameter no rank gave a gradient since the last synchronization keeps none. Always
  // true. [collective]
  bool reduce_accumulated_gradients() override;

  // ---- checkpoint (call between iterations)
  // What restores this reducer exactly: synchronized iterations, the gradient order its buckets
  // were rebuilt from (or will be), the parameter sizes it was built for, and the comm hook's
  // name and state under "comm_hook". static_graph's record is not kept: the first synchronized
  // iteration after loading records again (one more all_reduce, no overlap in that iteration).
  StateDict state_dict() const;
  // Restores state_dict()'s output, rebuilding the buckets it describes (the hook is told). Throws
  // CheckpointError when it was saved for other parameters (count or sizes) or holds the state
  // of another comm hook; a saved hook with empty state is not loaded (the new hook starts
  // fresh). Not a collective: every rank loads the state it saved, or all load rank 0's.
  void load_state_dict(const StateDict& state);

  // ---- inspection
  size_t num_buckets() const { return buckets_.size(); }
  const GradientBucket& bucket(size_t index) const { return buckets_.at(index); }
  // Bucket members, as parameter indices, in reduction order.
  std::vector<std::vector<size_t>> bucket_assignment() const;
  BucketLayout bucket_layout() const;
  int64_t synchronized_iterations() const { return synchronized_iterations_; }
  // Zero before the first synchronized iteration.
  const HookTraffic& last_traffic() const { return last_traffic_; }
  bool buckets_rebuilt() const { return buckets_rebuilt_; }
  const std::vector<torch::Tensor>& parameters() const { return parameters_; }
  // Called on the thread the event happens on (the autograd thread for GradientReady and most
  // BucketLaunched events).
  void set_event_listener(std::function<void(ReducerEvent, size_t)> listener) { listener_ = std::move(listener); }

 private:
  void on_gradient_ready(size_t index);  // the autograd hook
  void mark_ready(size_t index);
  void launch_ready_buckets();
  void build_buckets(const std::vector<size_t>& order);
  void rebuild_buckets();  // [collective]
  // Adopts `order` (a permutation of the parameters) as the rebuilt bucket order; tells the hook.
  void adopt_rebuilt_order(std::vector<size_t> order);
  // Throws InternalError when a parameter's gradient accumulator is no longer the hooked one.
  void check_accumulators() const;
  void attach_bucket_views();
  // Marks everything not ready yet, so that every bucket is launched; returns those indices.
  std::vector<size_t> complete_remaining();
  // Waits for every launched bucket and writes the results back, except (when
  // `skip_globally_unused`) to parameters no rank used (globally_used_).
  void wait_and_write_back(bool skip_globally_unused);
  // globally_used_ <- whether any rank's parameter got a gradient since the last synchronization
  // (used_since_sync_, all-reduced with Max); its bytes in flag_bytes_. [collective]
  void exchange_used_flags();
  void record_traffic();
  std::string names_of(const std::vector<size_t>& indices) const;
  // The InternalError message for a synchronized backward in which no hook fired `where`.
  std::string no_gradient_at_all(const std::string& where) const;
  void emit(ReducerEvent event, size_t value) const {
    if (listener_) listener_(event, value);
  }

  std::vector<torch::Tensor> parameters_;
  std::vector<std::string> names_;
  Communicator& communicator_;
  ReducerOptions options_;
  std::unique_ptr<CommHook> hook_;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;
  std::vector<uintptr_t> hook_keys_;

  std::vector<GradientBucket> buckets_;
  std::vector<std::pair<size_t, size_t>> location_;  // parameter → (bucket, slot)
  std::vector<CollectiveHandle> handles_;            // per bucket, this iteration
  buckets::ReadinessTracker tracker_;
  StaticGraphRecord static_record_;
  std::vector<size_t> first_gradient_order_;  // static graph's recording iteration: delayed marks
  // Per parameter: 1 when its gradient arrived since the last synchronized backward (no_sync
  // micro-batches included), for find_unused_parameters' "did any rank use it".
  std::vector<uint8_t> used_since_sync_;
  // Per parameter: whether any rank used it in the last synchronized iteration that checked
  // (every one with find_unused_parameters; the recording one with static_graph). Empty: unknown.
  std::vector<int> globally_used_;

  // Counters at the start of the synchronized backward, and the used-flags all_reduce's bytes.
  CollectiveCounters traffic_start_;
  int64_t flag_bytes_ = 0;
  HookTraffic last_traffic_;
  std::mutex mutex_;  // hooks vs. the training thread
  bool active_ = false;       // between any prepare and finalize
  bool in_backward_ = false;  // between a synchronized prepare and finalize
  std::exception_ptr hook_error_;
  int64_t synchronized_iterations_ = 0;
  bool rebuild_due_ = false;
  bool buckets_rebuilt_ = false;
  std::vector<size_t> first_ready_order_;
  std::vector<size_t> rebuilt_order_;  // the order the buckets were rebuilt from (rank 0's)
  std::function<void(ReducerEvent, size_t)> listener_;
};

}  // namespace volt::ddp
