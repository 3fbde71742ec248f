#include "strategies/ddp/reducer.h"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/variable.h>

#include "core/collective_site.h"
#include "core/compat.h"
#include "core/error.h"
#include "strategies/ddp/unused_parameters.h"
#include "strategies/dense_gradients.h"

namespace volt::ddp {

buckets::BucketLimits ReducerOptions::limits() const {
  buckets::BucketLimits limits;
  limits.bucket_bytes = std::max<int64_t>(1, static_cast<int64_t>(bucket_cap_mb * 1024.0 * 1024.0));
  limits.first_bucket_bytes = std::min(limits.first_bucket_bytes, limits.bucket_bytes);
  return limits;
}

void ReducerOptions::validate() const {
  check<ConfigurationError>(bucket_cap_mb > 0 && bucket_cap_mb <= 1024.0 * 1024.0,
                            "ddp: expected bucket_cap_mb in (0, 1048576], got ", bucket_cap_mb);
}

Reducer::Reducer(std::vector<torch::Tensor> parameters, std::vector<std::string> names, Communicator& communicator,
                 ReducerOptions options)
    : parameters_(std::move(parameters)),
      names_(std::move(names)),
      communicator_(communicator),
      options_(options),
      hook_(std::make_unique<AllReduceHook>(communicator)),
      static_record_(parameters_.size()) {
  options_.validate();
  check<ConfigurationError>(!parameters_.empty(),
                            "ddp: the module has no parameters that require grad; there is "
                            "nothing to synchronize (use --strategy single_device or give it parameters)");
  VOLT_INTERNAL_ASSERT(names_.size() == parameters_.size(), "one name per parameter");
  for (size_t i = 0; i < parameters_.size(); ++i) {
    const auto& p = parameters_[i];
    check<ConfigurationError>(p.requires_grad() && p.is_leaf(), "ddp: parameter '", names_[i],
                              "' must be a leaf tensor that requires grad");
    check<ConfigurationError>(p.layout() == torch::kStrided, "ddp: parameter '", names_[i],
                              "' is sparse; DDP reduces dense parameters only");
    auto accumulator = torch::autograd::impl::grad_accumulator(p);
    hook_keys_.push_back(compat::add_post_hook(*accumulator, [this, i] { on_gradient_ready(i); }));
    accumulators_.push_back(std::move(accumulator));
  }
  used_since_sync_.assign(parameters_.size(), 0);
  build_buckets(buckets::reverse_registration_order(parameters_.size()));
}

Reducer::~Reducer() {
  for (size_t i = 0; i < accumulators_.size(); ++i) accumulators_[i]->del_post_hook(hook_keys_[i]);
}

void Reducer::set_comm_hook(std::unique_ptr<CommHook> hook) {
  check<ConfigurationError>(hook != nullptr, "ddp: expected a comm hook, got nullptr");
  check<ConfigurationError>(!in_backward_, "ddp: the comm hook cannot change during backward");
  hook_ = std::move(hook);
}

void Reducer::build_buckets(const std::vector<size_t>& order) {
  const auto assignment = buckets::assign_buckets(parameters_, order, options_.limits());
  buckets_.clear();
  location_.assign(parameters_.size(), {0, 0});
  std::vector<size_t> bucket_of(parameters_.size()), sizes;
  // CPU buckets in buffers the communicator reduces fastest (in place in shared memory where its
  // all_reduce goes through shared memory: Note [all_reduce in place through shared memory]).
  std::vector<int64_t> numels;
  std::vector<c10::ScalarType> dtypes;
  std::vector<size_t> on_cpu;
  for (size_t b = 0; b < assignment.size(); ++b) {
    const auto& first = parameters_.at(assignment[b].front());
    if (!first.device().is_cpu()) continue;
    on_cpu.push_back(b);
    numels.push_back(GradientBucket::numel_of(parameters_, assignment[b]));
    dtypes.push_back(first.scalar_type());
  }
  std::vector<torch::Tensor> buffers(assignment.size());
  if (!on_cpu.empty()) {
    auto allocated = communicator_.allocate_buffers(numels, dtypes);
    for (size_t i = 0; i < on_cpu.size(); ++i) buffers[on_cpu[i]] = std::move(allocated.at(i));
  }
  for (size_t b = 0; b < assignment.size(); ++b) {
    buckets_.emplace_back(parameters_, assignment[b], std::move(buffers[b]));
    for (size_t slot = 0; slot < assignment[b].size(); ++slot) {
      location_[assignment[b][slot]] = {b, slot};
      bucket_of[assignment[b][slot]] = b;
    }
    sizes.push_back(assignment[b].size());
  }
  tracker_.set_layout(std::move(bucket_of), std::move(sizes));
  handles_.assign(buckets_.size(), CollectiveHandle());
  if (options_.gradient_as_bucket_view) attach_bucket_views();
}

void Reducer::attach_bucket_views() {
  for (size_t i = 0; i < parameters_.size(); ++i) {
    const auto [b, slot] = location_[i];
    buckets_[b].attach_view(slot, parameters_[i]);
  }
}

std::vector<std::vector<size_t>> Reducer::bucket_assignment() const {
  std::vector<std::vector<size_t>> assignment;
  for (const auto& bucket : buckets_) assignment.push_back(bucket.members());
  return assignment;
}

// Note [Rebuilt buckets]: the initial buckets follow reverse registration order, a guess at the
// order backward produces gradients. After the first synchronized iteration the reducer knows the
// real order; rank 0's is broadcast (ranks may differ, e.g. in which of two independent branches
// finishes first) and every rank rebuilds the same buckets from it, carrying gradients over.
void Reducer::rebuild_buckets() {
  const auto n = static_cast<int64_t>(parameters_.size());
  auto order = torch::empty({n}, torch::kLong);
  if (communicator_.rank() == 0) {
    VOLT_INTERNAL_ASSERT(first_ready_order_.size() == parameters_.size(), "the ready order covers every parameter");
    for (int64_t i = 0; i < n; ++i) order[i] = static_cast<int64_t>(first_ready_order_[static_cast<size_t>(i)]);
  }
  communicator_.broadcast(order, 0);
  std::vector<size_t> rank0_order(static_cast<size_t>(n));
  std::vector<bool> seen(parameters_.size(), false);
  const auto* values = order.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    check<DistributedError>(values[i] >= 0 && values[i] < n && !seen[static_cast<size_t>(values[i])], "ddp (rank ",
                            communicator_.rank(), "): rank 0's gradient order is not a permutation of ", n,
                            " parameters; do all ranks build the same model?");
    seen[static_cast<size_t>(values[i])] = true;
    rank0_order[static_cast<size_t>(i)] = static_cast<size_t>(values[i]);
  }
  adopt_rebuilt_order(std::move(rank0_order));
}

void Reducer::adopt_rebuilt_order(std::vector<size_t> order) {
  // Without bucket views the gradients live in .grad; with them, attach_view carries the
  // values over from the old buffers into the new ones.
  build_buckets(order);
  rebuilt_order_ = std::move(order);
  buckets_rebuilt_ = true;
  hook_->on_buckets_rebuilt(bucket_layout());
  emit(ReducerEvent::BucketsRebuilt, buckets_.size());
}

BucketLayout Reducer::bucket_layout() const {
  BucketLayout layout;
  for (const auto& bucket : buckets_) {
    layout.members.push_back(bucket.members());
    layout.numel.push_back(bucket.buffer().numel());
  }
  return layout;
}

// Note [Replaced gradient accumulators]
// The reducer learns that a gradient is ready from a post hook on the parameter's gradient
// accumulator, the autograd node it took at construction. LibTorch replaces that node when a
// parameter's dtype or device changes (Tensor::set_data, which module->to(...) uses): the next
// forward builds its graph on a new accumulator, the hooked one never runs again, and every
// parameter looks unused. Without find_unused_parameters each would then be reported as having
// "received no gradient"; with it, training would go on with gradients never synchronized. Both
// are caught before backward by comparing each parameter's current accumulator with the hooked
// one, and, as a backstop, after a synchronized backward in which no hook fired at all (on any
// rank, with find_unused_parameters; on this rank without): an InternalError either way, since
// it means whoever built the reducer did so before converting the module.
void Reducer::check_accumulators() const {
  std::vector<size_t> replaced;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    if (torch::autograd::impl::try_get_grad_accumulator(parameters_[i]) != accumulators_[i]) replaced.push_back(i);
  }
  if (replaced.empty()) return;
  const auto& first = parameters_[replaced.front()];
  const auto& built_for = buckets_[location_[replaced.front()].first].buffer();
  throw InternalError(detail::concat(
      "ddp (rank ", communicator_.rank(), " of ", communicator_.size(), "): the gradient accumulators of ",
      replaced.size(), " of ", parameters_.size(), " parameter(s) (", names_of(replaced),
      ") are not the ones the reducer hooked: the parameters were converted or moved after the reducer was built ('",
      names_[replaced.front()], "' is now ", first.dtype(), " on ", first.device(), ", its bucket holds ",
      built_for.dtype(), " on ", built_for.device(),
      "), so autograd no longer tells the reducer when their gradients are ready and gradients were NOT "
      "synchronized. Convert and move the module before building the reducer (Strategy::setup_module does: "
      "precision first, then the wrapper); see Note [Replaced gradient accumulators]"));
}

void Reducer::prepare_for_backward(const torch::Tensor& loss) {
  check<ConfigurationError>(!in_backward_,
                            "ddp: backward started again before the previous synchronized backward "
                            "finished; call backward once per forward (through the strategy)");
  check_accumulators();
  if (rebuild_due_) {
    rebuild_due_ = false;
    rebuild_buckets();
  }
  if (options_.gradient_as_bucket_view) attach_bucket_views();
  active_ = true;
  if (!require_sync()) return;
  tracker_.reset();
  handles_.assign(buckets_.size(), CollectiveHandle());
  hook_error_ = nullptr;
  first_gradient_order_.clear();
  in_backward_ = true;
  traffic_start_ = communicator_.counters();
  flag_bytes_ = 0;
  if (options_.static_graph) {
    static_record_.start_iteration();
    if (static_record_.recorded()) {
      for (const size_t index : static_record_.unused()) mark_ready(index);
      launch_ready_buckets();
    }
  } else if (options_.find_unused_parameters) {
    for (const size_t index : unreachable_accumulators(loss, accumulators_)) mark_ready(index);
    launch_ready_buckets();
  }
}

void Reducer::on_gradient_ready(size_t index) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!active_) return;
  used_since_sync_[index] = 1;
  if (!in_backward_ || hook_error_) return;
  try {
    if (options_.static_graph) {
      const bool last_expected = static_record_.gradient_arrived(index, names_[index]);
      if (!static_record_.recorded()) {
        // Note [Static graph's first iteration]: how often each gradient arrives is not known
        // yet, so every reduction waits for the end of backward (like PyTorch's).
        if (static_record_.seen_gradients(index) == 1) first_gradient_order_.push_back(index);
        return;
      }
      if (!last_expected) return;
    }
    check<ConfigurationError>(!tracker_.is_ready(index), "ddp: parameter '", names_[index],
                              "' received a second gradient in one backward (re-entrant backward or "
                              "activation checkpointing); set static_graph=true so that each parameter "
                              "is reduced once its last gradient has arrived");
    mark_ready(index);
    launch_ready_buckets();
  } catch (...) {
    hook_error_ = std::current_exception();
  }
}

void Reducer::mark_ready(size_t index) {
  check_dense_gradient(parameters_[index], names_[index], "ddp");  // Note [Sparse gradients]
  if (!tracker_.mark_ready(index)) return;
  const auto [b, slot] = location_[index];
  buckets_[b].copy_in(slot, parameters_[index]);
  emit(ReducerEvent::GradientReady, index);
}

void Reducer::launch_ready_buckets() {
  for (const size_t b : tracker_.take_launchable()) {
    GradBucket bucket;
    bucket.index = static_cast<int64_t>(b);
    bucket.is_last = b + 1 == buckets_.size();
    bucket.iteration = synchronized_iterations_;
    bucket.buffer = buckets_[b].buffer();
    for (const size_t index : buckets_[b].members()) bucket.parameters.push_back(parameters_[index]);
    const CollectiveSite site("ddp bucket " + std::to_string(b) + " (backward)");  // Note [Diagnosing a hang]
    handles_[b] = hook_->run(bucket);
    emit(ReducerEvent::BucketLaunched, b);
  }
}

std::vector<size_t> Reducer::complete_remaining() {
  const auto missing = tracker_.not_ready();
  for (const size_t index : missing) mark_ready(index);
  launch_ready_buckets();
  return missing;
}

void Reducer::finalize_backward() {
  std::unique_lock<std::mutex> lock(mutex_);
  active_ = false;
  if (!in_backward_) return;  // no_sync: gradients stay local
  in_backward_ = false;
  std::string usage_error, internal_error;
  try {
    if (hook_error_) std::rethrow_exception(hook_error_);
    const bool recording = options_.static_graph && !static_record_.recorded();
    if (recording) {
      for (const size_t index : first_gradient_order_) mark_ready(index);
      static_record_.finish_recording();
    }
    const auto missing = complete_remaining();
    if (missing.size() == parameters_.size() && !options_.static_graph && !options_.find_unused_parameters) {
      internal_error = no_gradient_at_all("on this rank");
    } else if (!missing.empty() && !recording && !options_.find_unused_parameters) {
      usage_error = options_.static_graph
                        ? "ddp: static_graph=true, but parameter(s) " + names_of(missing) +
                              " received fewer gradients in this iteration than in the first; the graph "
                              "changed: drop static_graph=true (and use find_unused_parameters=true)"
                        : "ddp: parameter(s) " + names_of(missing) + " received no gradient in this backward (rank " +
                              std::to_string(communicator_.rank()) +
                              "); every parameter must take part in the loss, or set find_unused_parameters=true "
                              "(--strategy ddp:find_unused_parameters=true, or ddp_find_unused_parameters_true), "
                              "or static_graph=true if the same ones are unused every iteration";
    }
    // Which parameters any rank used: the others keep their gradient as it was (undefined),
    // exactly like a single process that never touched them.
    // A static graph's record holds for every later iteration.
    if (options_.find_unused_parameters || recording) {
      exchange_used_flags();
      if (options_.find_unused_parameters && std::count(globally_used_.begin(), globally_used_.end(), 0) ==
                                                 static_cast<std::ptrdiff_t>(globally_used_.size())) {
        internal_error = no_gradient_at_all("on any rank");
      }
    }
    wait_and_write_back(!globally_used_.empty());
    record_traffic();
  } catch (...) {
    // Best effort to leave no collective half-issued on this rank, then report the first error.
    const auto error = std::current_exception();
    try {
      complete_remaining();
      wait_and_write_back(false);
    } catch (...) {
    }
    ++synchronized_iterations_;
    std::fill(used_since_sync_.begin(), used_since_sync_.end(), 0);
    std::rethrow_exception(error);
  }
  std::fill(used_since_sync_.begin(), used_since_sync_.end(), 0);
  if (++synchronized_iterations_ == 1) {
    first_ready_order_ = tracker_.ready_order();
    rebuild_due_ = options_.static_graph || !options_.find_unused_parameters;
  }
  check<InternalError>(internal_error.empty(), internal_error);
  check<ConfigurationError>(usage_error.empty(), usage_error);
}

bool Reducer::reduce_accumulated_gradients() {
  std::unique_lock<std::mutex> lock(mutex_);
  check<ConfigurationError>(!in_backward_,
                            "ddp: a window closed without backward while a synchronized backward "
                            "was still unfinished");
  if (rebuild_due_) {
    rebuild_due_ = false;
    rebuild_buckets();
  }
  tracker_.reset();
  handles_.assign(buckets_.size(), CollectiveHandle());
  traffic_start_ = communicator_.counters();
  flag_bytes_ = 0;
  // With find_unused_parameters, which parameters any rank gave a gradient in the window: the
  // others keep none, as in one process (finalize_backward exchanges the same flags). Without it
  // every backward reaches every parameter (or finalize_backward refuses it), one that missed a
  // gradient here contributes zeros, and nothing crosses the reducer's group but the hook's own
  // traffic (post-local-SGD's local phase stays in its subgroup).
  if (options_.find_unused_parameters) exchange_used_flags();
  complete_remaining();  // every bucket through the hook
  wait_and_write_back(/*skip_globally_unused=*/options_.find_unused_parameters);
  record_traffic();
  std::fill(used_since_sync_.begin(), used_since_sync_.end(), 0);
  if (++synchronized_iterations_ == 1) {
    first_ready_order_ = tracker_.ready_order();
    rebuild_due_ = options_.static_graph || !options_.find_unused_parameters;
  }
  return true;
}

void Reducer::exchange_used_flags() {
  auto used = torch::from_blob(used_since_sync_.data(), {static_cast<int64_t>(used_since_sync_.size())}, torch::kUInt8)
                  .to(torch::kInt);
  communicator_.all_reduce(used, ReduceOp::Max);
  flag_bytes_ = used.numel() * static_cast<int64_t>(used.element_size());
  const auto* flags = used.data_ptr<int>();
  globally_used_.assign(flags, flags + used.numel());
}

void Reducer::record_traffic() {
  // Between prepare and the end of the waits only this reducer communicates (the training thread
  // is inside backward, then here): the counters' difference, less the used-flags all_reduce, is
  // what the hook sent.
  last_traffic_.hook_bytes = (communicator_.counters() - traffic_start_).total_bytes() - flag_bytes_;
  last_traffic_.bucket_bytes = 0;
  for (const auto& bucket : buckets_) {
    last_traffic_.bucket_bytes += bucket.buffer().numel() * static_cast<int64_t>(bucket.buffer().element_size());
  }
}

std::string Reducer::no_gradient_at_all(const std::string& where) const {
  return "ddp (rank " + std::to_string(communicator_.rank()) + " of " + std::to_string(communicator_.size()) +
         "): no parameter received a gradient in this synchronized backward " + where +
         "; gradients were NOT synchronized. Either the parameters were converted or moved after the reducer was "
         "built (Note [Replaced gradient accumulators]: build it after module->to(...)), or the loss does not "
         "depend on any parameter of the module";
}

void Reducer::wait_and_write_back(bool skip_globally_unused) {
  torch::NoGradGuard no_grad;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    auto result = std::exchange(handles_[b], CollectiveHandle()).wait();
    auto& bucket = buckets_[b];
    if (result.defined() && !result.is_same(bucket.buffer())) bucket.buffer().copy_(result);
    const auto& members = bucket.members();
    for (size_t slot = 0; slot < members.size(); ++slot) {
      auto& parameter = parameters_[members[slot]];
      if (skip_globally_unused && globally_used_[members[slot]] == 0) {
        // Nobody used it: like one process, leave no gradient (the view is re-attached before
        // the next backward).
        if (options_.gradient_as_bucket_view) parameter.mutable_grad().reset();
        continue;
      }
      bucket.copy_out(slot, parameter);
    }
  }
}

std::string Reducer::names_of(const std::vector<size_t>& indices) const {
  std::string text;
  const size_t shown = std::min<size_t>(indices.size(), 10);
  for (size_t i = 0; i < shown; ++i) text += (i ? ", '" : "'") + names_[indices[i]] + "'";
  if (indices.size() > shown) text += " and " + std::to_string(indices.size() - shown) + " more";
  return text;
}

}  // namespace volt::ddp
