#include "strategies/sharded/sharded_reducer.h"

#include <torch/csrc/autograd/function.h>
#include <algorithm>
#include <torch/csrc/autograd/variable.h>

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
  bucket_of_.assign(n, 0);
  ready_.assign(n, false);
  // Reverse registration order; one open shared bucket per owner.
  std::vector<int64_t> open(static_cast<size_t>(communicator_.size()), -1);
  for (size_t k = n; k-- > 0;) {
    const auto& p = parameters_[k];
    check<ConfigurationError>(p.requires_grad() && p.is_leaf() && p.layout() == torch::kStrided, "ddp_sharded: parameter '",
                              names_[k], "' must be a dense leaf tensor that requires grad");
    check<ConfigurationError>(owners_[k] >= 0 && owners_[k] < communicator_.size(), "ddp_sharded: parameter '",
                              names_[k], "' has no owner among the ", communicator_.size(), " ranks");
    const int64_t owner = owners_[k];
    if (options_.reduce_buffer_size == 0 || p.numel() >= options_.reduce_buffer_size) {
      buckets_.push_back(Bucket{{k}, owner, p.numel(), false});
      bucket_of_[k] = buckets_.size() - 1;
      continue;
    }
    auto& slot = open[static_cast<size_t>(owner)];
    if (slot >= 0 && (buckets_[static_cast<size_t>(slot)].numel + p.numel() > options_.reduce_buffer_size ||
                      buckets_[static_cast<size_t>(slot)].members.empty() ||
                      parameters_[buckets_[static_cast<size_t>(slot)].members.front()].scalar_type() != p.scalar_type())) {
      slot = -1;  // full (or another dtype): a new one
    }
    if (slot < 0) {
      buckets_.push_back(Bucket{{}, owner, 0, true});
      slot = static_cast<int64_t>(buckets_.size()) - 1;
    }
    auto& bucket = buckets_[static_cast<size_t>(slot)];
    bucket.members.push_back(k);
    bucket.numel += p.numel();
    bucket_of_[k] = static_cast<size_t>(slot);
  }
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

std::vector<int64_t> ShardedReducer::bucket_owners() const {
  std::vector<int64_t> owners;
  for (const auto& b : buckets_) owners.push_back(b.owner);
  return owners;
}

void ShardedReducer::prepare_for_backward() {
  std::lock_guard<std::mutex> lock(mutex_);
  check<ConfigurationError>(!in_backward_, "ddp_sharded: backward started again before the previous synchronized "
                            "backward finished; call backward once per forward (through the strategy)");
  if (!require_sync_) return;
  for (size_t k = 0; k < parameters_.size(); ++k) {
    check<InternalError>(torch::autograd::impl::grad_accumulator(parameters_[k]) == accumulators_[k], "ddp_sharded: ",
                         "parameter '", names_[k], "' was converted or moved after the reducer was built; its "
                         "gradient would not be reduced");
  }
  for (auto& b : buckets_) {
    b.ready = 0;
    b.launched = b.done = false;
    b.buffer = torch::Tensor();
    b.handle = CollectiveHandle();
  }
  std::fill(ready_.begin(), ready_.end(), false);
  next_launch_ = 0;
  hook_error_ = nullptr;
  in_backward_ = true;
}

void ShardedReducer::on_gradient_ready(size_t index) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!in_backward_ || hook_error_) return;
  try {
    check<ConfigurationError>(!ready_[index], "ddp_sharded: parameter '", names_[index],
                              "' received a second gradient in one backward (re-entrant backward); ddp_sharded "
                              "reduces each gradient once");
    check_dense_gradient(parameters_[index], names_[index], "ddp_sharded");  // Note [Sparse gradients]
    ready_[index] = true;
    ++buckets_[bucket_of_[index]].ready;
    launch_ready();
    finish_completed(/*wait_all=*/false);
  } catch (...) {
    hook_error_ = std::current_exception();
  }
}

void ShardedReducer::launch_ready() {
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].ready == buckets_[next_launch_].members.size()) {
    launch(buckets_[next_launch_++]);
  }
}

void ShardedReducer::launch(Bucket& bucket) {
  torch::NoGradGuard no_grad;
  const double world = static_cast<double>(communicator_.size());
  const bool mine = bucket.owner == communicator_.rank();
  const auto& first = parameters_[bucket.members.front()];
  auto options = first.options().requires_grad(false);
  if (options_.reduce_fp16 && first.is_floating_point()) options = options.dtype(torch::kHalf);
  if (!bucket.shared) {
    auto& grad = parameters_[bucket.members.front()].mutable_grad();
    bucket.buffer = options.dtype() == grad.dtype() ? grad.div_(world) : grad.to(options).div_(world);
  } else {
    bucket.buffer = torch::empty({bucket.numel}, options);
    int64_t offset = 0;
    for (const size_t k : bucket.members) {
      auto& grad = parameters_[k].mutable_grad();
      bucket.buffer.narrow(0, offset, grad.numel()).copy_(grad.reshape({-1})).div_(world);
      offset += grad.numel();
      if (!mine) grad.reset();  // copied: a non-owner needs it no more
    }
  }
  const bool own_allocation = bucket.shared || !bucket.buffer.is_same(parameters_[bucket.members.front()].grad());
  bucket.buffer_bytes = own_allocation ? static_cast<int64_t>(bucket.buffer.nbytes()) : 0;
  live_buffer_bytes_ += bucket.buffer_bytes;
  peak_buffer_bytes_ = std::max(peak_buffer_bytes_, live_buffer_bytes_);
  bucket.handle = communicator_.reduce_async(bucket.buffer, bucket.owner, ReduceOp::Sum);
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
  bucket.done = true;
  torch::NoGradGuard no_grad;
  const bool mine = bucket.owner == communicator_.rank();
  if (!mine) {
    for (const size_t k : bucket.members) parameters_[k].mutable_grad().reset();
  } else if (bucket.shared) {
    int64_t offset = 0;
    for (const size_t k : bucket.members) {
      auto& grad = parameters_[k].mutable_grad();
      grad.copy_(bucket.buffer.narrow(0, offset, grad.numel()).view(grad.sizes()));
      offset += grad.numel();
    }
  } else {
    auto& grad = parameters_[bucket.members.front()].mutable_grad();
    if (!bucket.buffer.is_same(grad)) grad.copy_(bucket.buffer);
  }
  bucket.buffer = torch::Tensor();
  live_buffer_bytes_ -= bucket.buffer_bytes;
  bucket.buffer_bytes = 0;
  bucket.handle = CollectiveHandle();
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
  std::vector<std::string> missing;
  try {
    if (hook_error_) std::rethrow_exception(hook_error_);
    // A parameter without a gradient reduces zeros, so that every rank issues the same collectives.
    for (size_t k = 0; k < parameters_.size(); ++k) {
      if (ready_[k]) continue;
      missing.push_back(names_[k]);
      parameters_[k].mutable_grad() = torch::zeros_like(parameters_[k]);
      ready_[k] = true;
      ++buckets_[bucket_of_[k]].ready;
    }
    launch_ready();
    finish_completed(/*wait_all=*/true);
  } catch (...) {
    const auto error = std::current_exception();
    try {
      for (auto& b : buckets_) {
        if (!b.launched) launch(b);
      }
      finish_completed(true);
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
