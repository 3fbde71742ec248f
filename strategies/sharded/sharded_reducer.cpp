#include "strategies/sharded/sharded_reducer.h"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>

#include "core/compat.h"
#include "core/error.h"
#include "strategies/dense_gradients.h"

namespace volt {

void ShardedReducerOptions::validate() const {
  check<ConfigurationError>(reduce_buffer_size >= 0, "--strategy ddp_sharded: expected reduce_buffer_size >= 0 "
                            "elements (0: no shared buffers), got ", reduce_buffer_size);
}

ShardedReducer::ShardedReducer(std::vector<torch::Tensor> parameters, std::vector<std::string> names,
                               std::vector<int64_t> owners, Communicator& communicator, ShardedReducerOptions options)
    : parameters_(std::move(parameters)),
      names_(std::move(names)),
      owners_(std::move(owners)),
      communicator_(communicator),
      options_(options) {
  options_.validate();
  VOLT_INTERNAL_ASSERT(names_.size() == parameters_.size() && owners_.size() == parameters_.size(),
                       "one name and one owner per parameter");
  check<ConfigurationError>(!parameters_.empty(), "ddp_sharded: the module has no parameters that require grad");
  const auto n = parameters_.size();
  for (size_t k = 0; k < n; ++k) {
    const auto& p = parameters_[k];
    check<ConfigurationError>(p.requires_grad() && p.is_leaf() && p.layout() == torch::kStrided,
                              "ddp_sharded: parameter '", names_[k],
                              "' must be a dense leaf tensor that requires grad");
    check<ConfigurationError>(owners_[k] >= 0 && owners_[k] < communicator_.size(), "ddp_sharded: parameter '",
                              names_[k], "' has no owner among the ", communicator_.size(), " ranks");
  }
  std::vector<size_t> bucket_of(n, 0), bucket_sizes;
  for (auto& members : buckets::assign_consecutive_buckets(parameters_, options_.reduce_buffer_size)) {
    Bucket bucket;
    bucket.members = std::move(members);
    std::stable_sort(bucket.members.begin(), bucket.members.end(),
                     [&](size_t a, size_t b) { return owners_[a] < owners_[b]; });
    bucket.counts.assign(static_cast<size_t>(communicator_.size()), 0);
    for (const size_t k : bucket.members) {
      bucket.counts[static_cast<size_t>(owners_[k])] += parameters_[k].numel();
      bucket.numel += parameters_[k].numel();
      bucket_of[k] = buckets_.size();
    }
    bucket_sizes.push_back(bucket.members.size());
    buckets_.push_back(std::move(bucket));
  }
  tracker_.set_layout(std::move(bucket_of), std::move(bucket_sizes));
  frozen_.assign(n, false);
  for (size_t k = 0; k < n; ++k) {
    auto accumulator = torch::autograd::impl::grad_accumulator(parameters_[k]);
    hook_keys_.push_back(compat::add_post_hook(*accumulator, [this, k] { on_gradient_ready(k); }));
    accumulators_.push_back(std::move(accumulator));
  }
}

ShardedReducer::~ShardedReducer() {
  for (size_t i = 0; i < accumulators_.size(); ++i) accumulators_[i]->del_post_hook(hook_keys_[i]);
}

std::vector<std::vector<size_t>> ShardedReducer::buckets() const {
  std::vector<std::vector<size_t>> members;
  for (const auto& b : buckets_) members.push_back(b.members);
  return members;
}

void ShardedReducer::prepare_for_backward(const torch::Tensor&) {
  std::lock_guard<std::mutex> lock(mutex_);
  check<ConfigurationError>(!in_backward_, "ddp_sharded: backward started again before the previous synchronized "
                            "backward finished; call backward once per forward (through the strategy)");
  if (!require_sync()) return;
  for (auto& b : buckets_) {
    b.launched = b.done = false;
    b.output = torch::Tensor();
    b.handle = CollectiveHandle();
  }
  tracker_.reset();
  frozen_.assign(parameters_.size(), false);
  for (size_t k = 0; k < parameters_.size(); ++k) {
    if (!parameters_[k].requires_grad()) {
      frozen_[k] = true;  // no gradient comes: ready now, zeros in its bucket
      tracker_.mark_ready(k);
      continue;
    }
    check<InternalError>(torch::autograd::impl::grad_accumulator(parameters_[k]) == accumulators_[k], "ddp_sharded: ",
                         "parameter '", names_[k], "' was converted or moved after the reducer was built; its "
                         "gradient would not be reduced");
  }
  hook_error_ = nullptr;
  in_backward_ = true;
  launch_ready();  // buckets of frozen parameters alone
}

void ShardedReducer::on_gradient_ready(size_t index) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!in_backward_ || hook_error_) return;
  try {
    check<ConfigurationError>(!tracker_.is_ready(index), "ddp_sharded: parameter '", names_[index],
                              "' received a second gradient in one backward (re-entrant backward); ddp_sharded "
                              "reduces each gradient once");
    check_dense_gradient(parameters_[index], names_[index], "ddp_sharded");  // Note [Sparse gradients]
    tracker_.mark_ready(index);
    launch_ready();
    finish_completed(/*wait_all=*/false);
  } catch (...) {
    hook_error_ = std::current_exception();
  }
}

void ShardedReducer::launch_ready() {
  for (const size_t b : tracker_.take_launchable()) launch(buckets_[b]);
}

void ShardedReducer::count_buffer(int64_t bytes) {
  live_buffer_bytes_ += bytes;
  peak_buffer_bytes_ = std::max(peak_buffer_bytes_, live_buffer_bytes_);
}

void ShardedReducer::launch(Bucket& bucket) {
  torch::NoGradGuard no_grad;
  const double world = static_cast<double>(communicator_.size());
  const int64_t me = communicator_.rank();
  const auto& first = parameters_[bucket.members.front()];
  auto options = first.options().requires_grad(false);
  if (options_.reduce_fp16 && first.is_floating_point()) options = options.dtype(torch::kHalf);
  auto& lone_grad = parameters_[bucket.members.front()].mutable_grad();
  torch::Tensor input;
  const bool in_place = bucket.members.size() == 1 && !frozen_[bucket.members.front()] &&
                        lone_grad.scalar_type() == options.dtype() && lone_grad.is_contiguous();
  if (in_place) {
    input = lone_grad.view({-1}).div_(world);  // its own storage is the buffer
  } else {
    input = torch::empty({bucket.numel}, options);
    int64_t offset = 0;
    for (const size_t k : bucket.members) {
      const auto numel = parameters_[k].numel();
      if (frozen_[k]) {
        input.narrow(0, offset, numel).zero_();  // its gradient is left as it was
        offset += numel;
        continue;
      }
      auto& grad = parameters_[k].mutable_grad();
      input.narrow(0, offset, numel).copy_(grad.reshape({-1}));
      offset += numel;
      if (owners_[k] != me) grad.reset();  // in the buffer: a non-owner needs it no more
    }
    input.div_(world);
  }
  bucket.output = torch::empty({bucket.counts[static_cast<size_t>(me)]}, options);
  bucket.buffer_bytes = static_cast<int64_t>(bucket.output.nbytes() + (in_place ? 0 : input.nbytes()));
  count_buffer(bucket.buffer_bytes);
  // The handle keeps `input` alive until the reduce completed.
  bucket.handle = communicator_.reduce_scatter_chunks_async(bucket.output, input, bucket.counts, ReduceOp::Sum);
  bucket.launched = true;
}

void ShardedReducer::finish_completed(bool wait_all) {
  for (auto& bucket : buckets_) {
    if (!bucket.launched || bucket.done) continue;
    if (!wait_all && !bucket.handle.is_completed()) continue;
    finish(bucket);
  }
}

void ShardedReducer::finish(Bucket& bucket) {
  bucket.handle.wait();
  bucket.handle = CollectiveHandle();
  bucket.done = true;
  torch::NoGradGuard no_grad;
  const int64_t me = communicator_.rank();
  int64_t offset = 0;
  for (const size_t k : bucket.members) {
    auto& grad = parameters_[k].mutable_grad();
    if (owners_[k] != me) {
      if (!frozen_[k]) grad.reset();
      continue;
    }
    const auto numel = parameters_[k].numel();
    if (!frozen_[k]) grad.copy_(bucket.output.narrow(0, offset, numel).view(parameters_[k].sizes()));
    offset += numel;
  }
  bucket.output = torch::Tensor();
  count_buffer(-bucket.buffer_bytes);
  bucket.buffer_bytes = 0;
}

void ShardedReducer::drop_gradients_of_other_owners() {
  for (size_t k = 0; k < parameters_.size(); ++k) {
    if (owners_[k] != communicator_.rank()) parameters_[k].mutable_grad().reset();
  }
}

void ShardedReducer::finalize_backward() {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!in_backward_) return;  // no_sync: gradients stay local
  in_backward_ = false;
  // A parameter without a gradient reduces zeros, so that every rank issues the same collectives.
  std::vector<std::string> missing;
  auto complete = [&] {
    for (const size_t k : tracker_.not_ready()) {
      missing.push_back(names_[k]);
      parameters_[k].mutable_grad() = torch::zeros_like(parameters_[k]);
      tracker_.mark_ready(k);
    }
    launch_ready();
    finish_completed(/*wait_all=*/true);
  };
  try {
    if (hook_error_) std::rethrow_exception(hook_error_);
    complete();
  } catch (...) {
    const auto error = std::current_exception();
    try {
      // The peers are waiting in this backward's remaining reduces: take part, then report.
      complete();
    } catch (...) {
    }
    std::rethrow_exception(error);
  }
  if (missing.empty()) return;
  std::string list;
  for (size_t i = 0; i < missing.size() && i < 10; ++i) list += (i ? ", '" : "'") + missing[i] + "'";
  throw ConfigurationError("ddp_sharded: parameter(s) " + list + (missing.size() > 10 ? " and more" : "") +
                           " received no gradient in this backward (rank " + std::to_string(communicator_.rank()) +
                           "); ddp_sharded needs every trainable parameter in the loss. Freeze the unused ones "
                           "(requires_grad false) or use --strategy ddp:find_unused_parameters=true");
}

}  // namespace volt
