#include "strategies/fsdp/flat_parameter.h"

#include <numeric>

#include "core/collective_site.h"
#include "core/error.h"

namespace volt::fsdp {

namespace {

// Frees a storage's bytes in place (Note [Freeing gathered parameters]); views keep the StorageImpl.
void free_storage(const torch::Tensor& tensor) {
  auto* storage = tensor.storage().unsafeGetStorageImpl();
  storage->set_data_ptr_noswap(at::DataPtr(nullptr, tensor.device()));
  storage->set_nbytes(0);
}

// Gives a freed storage `bytes` again, from its own allocator (CPU or CUDA alike).
void allocate_storage(const torch::Tensor& tensor, size_t bytes) {
  auto* storage = tensor.storage().unsafeGetStorageImpl();
  storage->set_data_ptr_noswap(storage->allocator()->allocate(bytes));
  storage->set_nbytes(bytes);
}

size_t bytes_of(const torch::Tensor& tensor) { return static_cast<size_t>(tensor.numel()) * tensor.element_size(); }

// A copy of `tensor` in host memory, pinned when it comes from a CUDA device (so that the copies
// between them are DMA transfers, as PyTorch's offloaded shards).
torch::Tensor host_copy(const torch::Tensor& tensor) {
  auto host = torch::empty(tensor.sizes(), tensor.options().device(torch::kCPU).pinned_memory(tensor.is_cuda()));
  host.copy_(tensor);
  return host;
}

}  // namespace

int64_t FlatParameter::Entry::numel() const {
  return std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>());
}

FlatParameter::FlatParameter(std::vector<std::pair<std::string, torch::Tensor>> parameters, Communicator& communicator,
                             std::optional<torch::Dtype> cast_dtype, std::shared_ptr<GatheredBytes> gathered,
                             int64_t gradient_world, bool offload_to_host, ShardLayout layout)
    : communicator_(communicator),
      rank_(communicator.rank()),
      world_(communicator.size()),
      gradient_world_(gradient_world > 0 ? gradient_world : communicator.size()),
      layout_(layout),
      gathered_bytes_(std::move(gathered)) {
  std::vector<torch::Tensor> flat_pieces;
  for (auto& [name, parameter] : parameters) {
    const auto& first = parameters.front().second;
    check<ConfigurationError>(parameter.device() == first.device(),
                              "fsdp: the parameters of one unit must share a "
                              "device; '",
                              name, "' is on ", parameter.device().str(), ", '", parameters.front().first, "' on ",
                              first.device().str(), ". Move the module first, or wrap these in separate units");
    check<ConfigurationError>(layout == ShardLayout::PerParameter || parameter.scalar_type() == first.scalar_type(),
                              "fsdp: the parameters of one unit must share a dtype in the flat layout; '", name,
                              "' is ", c10::toString(parameter.scalar_type()), ", '", parameters.front().first, "' ",
                              c10::toString(first.scalar_type()),
                              ". Use layout=per_parameter (which gathers mixed dtypes in one "
                              "all-gather), convert the module first, or wrap these in separate units");
    check<ConfigurationError>(parameter.layout() == torch::kStrided && parameter.is_leaf(), "fsdp: parameter '", name,
                              "' must be a dense leaf tensor");
    Entry entry{name, parameter, numel_, parameter.sizes().vec(), parameter.requires_grad()};
    entry.dtype = parameter.scalar_type();
    // Mixed precision computes floating-point parameters in its dtype; the rest keep their own.
    entry.compute_dtype = cast_dtype && at::isFloatingType(entry.dtype) ? *cast_dtype : entry.dtype;
    entries_.push_back(std::move(entry));
    numel_ += parameter.numel();
    flat_pieces.push_back(parameter.detach().reshape({-1}));
  }
  if (entries_.empty()) return;
  compute_device_ = entries_.front().parameter.device();
  // FSDPStrategy refuses cpu_offload for a run that does not compute on CUDA, saying what to do.
  VOLT_INTERNAL_ASSERT(!offload_to_host || compute_device_.is_cuda(), "an offloaded unit computes on CUDA");
  if (layout_ == ShardLayout::Flat) {
    build_flat(flat_pieces, offload_to_host);
  } else {
    build_per_parameter(flat_pieces, offload_to_host);
  }
  point_parameters_at(full_);
  gathered_ = true;
  if (gathered_bytes_) gathered_bytes_->add(static_cast<int64_t>(bytes_of(full_)));
}

int64_t FlatParameter::unsharded_bytes() const {
  if (entries_.empty()) return 0;
  return gathered_block_numel_ * world_ * static_cast<int64_t>(full_.element_size());
}

void FlatParameter::build_flat(const std::vector<torch::Tensor>& flat_pieces, bool offload_to_host) {
  shard_numel_ = gradient_shard_numel_ = gathered_block_numel_ = (numel_ + world_ - 1) / world_;
  auto flat = torch::zeros({shard_numel_ * world_}, entries_.front().parameter.options());
  flat.narrow(0, 0, numel_).copy_(torch::cat(flat_pieces));
  const auto mine = flat.narrow(0, rank_ * shard_numel_, shard_numel_);
  shard_ = (offload_to_host ? host_copy(mine) : mine.clone()).set_requires_grad(true);
  full_ = flat.to(entries_.front().compute_dtype);
}

void FlatParameter::build_per_parameter(const std::vector<torch::Tensor>& flat_pieces, bool offload_to_host) {
  std::vector<std::vector<int64_t>> shapes;
  std::vector<bool> trainable;
  std::vector<torch::Dtype> dtypes, compute_dtypes;
  for (const auto& entry : entries_) {
    shapes.push_back(entry.shape);
    trainable.push_back(entry.trainable);
    dtypes.push_back(entry.dtype);
    compute_dtypes.push_back(entry.compute_dtype);
  }
  auto chunks = layout_chunks(shapes, trainable, world_, dtypes, compute_dtypes);
  shard_numel_ = chunks.block_numel;
  gathered_block_numel_ = chunks.gathered_numel;
  gradient_shard_numel_ = chunks.gradient_numel;
  // Both blocks of one dtype each (offsets in elements, the same): the shard is sent as it is.
  shard_is_gathered_block_ = chunks.block_dtype != torch::kByte && chunks.gathered_dtype != torch::kByte;
  const auto options = entries_.front().parameter.options();
  auto block = torch::zeros({shard_numel_}, options.dtype(chunks.block_dtype));
  // full_: the parameters one after another in their compute dtypes (bytes, aligned, where they differ).
  std::vector<int64_t> numels;
  for (const auto& entry : entries_) numels.push_back(entry.numel());
  const auto natural = place_in_block(numels, std::vector<bool>(entries_.size(), true), compute_dtypes);
  for (size_t i = 0; i < entries_.size(); ++i) {
    auto& entry = entries_[i];
    entry.chunk = chunks.chunks[i];
    entry.offset = natural.offsets[i];
    typed_span(block, entry.chunk.offset, entry.chunk.count(rank_), entry.dtype)
        .copy_(flat_pieces[i].narrow(0, entry.chunk.begin(rank_), entry.chunk.count(rank_)));
  }
  shard_ = offload_to_host ? host_copy(block) : block;
  for (auto& entry : entries_) {
    // A leaf of its own (what the optimizer steps) over the entry's chunk of the block.
    entry.shard = typed_span(shard_, entry.chunk.offset, entry.chunk.chunk_numel(), entry.dtype)
                      .view(entry.chunk.chunk_shape(entry.shape))
                      .detach()
                      .set_requires_grad(entry.trainable);
  }
  full_ = torch::empty({natural.numel}, options.dtype(natural.dtype));
  for (size_t i = 0; i < entries_.size(); ++i) {
    typed_span(full_, entries_[i].offset, entries_[i].numel(), entries_[i].compute_dtype).copy_(flat_pieces[i]);
  }
}

std::vector<FlatParameter::Piece> FlatParameter::pieces() const {
  std::vector<Piece> out;
  for (size_t i = 0; i < entries_.size(); ++i) {
    const auto& entry = entries_[i];
    if (layout_ == ShardLayout::PerParameter) {
      out.push_back({i, entry.chunk.begin(rank_), entry.chunk.count(rank_), entry.chunk.offset});
      continue;
    }
    const int64_t lo = shard_offset(), hi = lo + shard_numel_;
    const int64_t begin = std::max(lo, entry.offset), end = std::min(hi, entry.offset + entry.numel());
    if (begin < end) out.push_back({i, begin - entry.offset, end - begin, begin - lo});
  }
  return out;
}

const torch::Tensor& FlatParameter::stepped(size_t entry) const {
  return layout_ == ShardLayout::Flat ? shard_ : entries_.at(entry).shard;
}

std::vector<torch::Tensor> FlatParameter::stepped_tensors() const {
  if (entries_.empty()) return {};
  if (layout_ == ShardLayout::Flat) return {shard_};
  std::vector<torch::Tensor> out;
  for (const auto& entry : entries_) out.push_back(entry.shard);
  return out;
}

int64_t FlatParameter::stepped_numel(size_t entry) const {
  return layout_ == ShardLayout::Flat ? shard_numel_ : entries_.at(entry).chunk.chunk_numel();
}

int64_t FlatParameter::stepped_offset(size_t entry) const {
  return layout_ == ShardLayout::Flat ? entries_.at(entry).offset : 0;
}

torch::Tensor FlatParameter::gather_stepped_to(size_t entry, const torch::Tensor& stepped_like, int64_t root) const {
  if (layout_ == ShardLayout::Flat) return gather_shards_to(stepped_like, root);
  const auto& e = entries_.at(entry);
  VOLT_INTERNAL_ASSERT(stepped_like.numel() == e.chunk.chunk_numel(),
                       "gather_stepped_to: a tensor of the chunk's size");
  const auto gathered = communicator_.gather(stepped_like.detach().contiguous().view({-1}), root);
  if (communicator_.rank() != root) return {};
  auto out = torch::empty({e.numel()}, gathered.options());
  copy_chunks_out(gathered.reshape({world_, e.chunk.chunk_numel()}), e.chunk, out);
  return out;
}

void FlatParameter::copy_blocks_out(const torch::Tensor& blocks) const {
  const auto rows = blocks.view({world_, gathered_block_numel_});
  for (const auto& entry : entries_) {
    copy_chunks_out(typed_span(rows, entry.chunk.gathered_offset, entry.chunk.chunk_numel(), entry.compute_dtype),
                    entry.chunk, typed_span(full_, entry.offset, entry.numel(), entry.compute_dtype));
  }
}

void FlatParameter::write_gathered_block(const torch::Tensor& row) const {
  if (shard_is_gathered_block_) {
    row.copy_(shard_.detach());
    return;
  }
  for (const auto& entry : entries_) {
    const int64_t n = entry.chunk.chunk_numel();
    typed_span(row, entry.chunk.gathered_offset, n, entry.compute_dtype)
        .copy_(typed_span(shard_.detach(), entry.chunk.offset, n, entry.dtype));
  }
}

void FlatParameter::point_parameters_at(const torch::Tensor& flat) {
  torch::NoGradGuard no_grad;
  for (auto& entry : entries_)
    entry.parameter.set_data(typed_span(flat, entry.offset, entry.numel(), entry.compute_dtype).view(entry.shape));
}

FlatParameter::~FlatParameter() {
  if (!pending_) return;
  try {
    pending_->wait();
  } catch (...) {
    // The run is failing already (a timed-out or broken collective): the error that caused it is
    // the one to report; the storage is not freed before the collective is done with it.
  }
}

CollectiveHandle FlatParameter::start_gather(bool ahead) {
  const CollectiveSite site(ahead ? "fsdp parameters' all_gather (prefetched)" : "fsdp parameters' all_gather");
  allocate_storage(full_, bytes_of(full_));
  if (gathered_bytes_) gathered_bytes_->add(static_cast<int64_t>(bytes_of(full_)));
  torch::NoGradGuard no_grad;
  // Per parameter the all-gather fills the blocks, copied out into full_ when it completed.
  if (layout_ == ShardLayout::PerParameter) {
    blocks_ = torch::empty({gathered_block_numel_ * world_}, full_.options());
    if (gathered_bytes_) gathered_bytes_->add(static_cast<int64_t>(bytes_of(blocks_)));
  }
  auto& target = layout_ == ShardLayout::PerParameter ? blocks_ : full_;
  // From every rank's shard, or from the parts a group kept (Note [Resharding to a group]).
  const bool from_part = group_part_.defined();
  Communicator& over = from_part ? *group_ : communicator_;
  const int64_t count = from_part ? group_part_.numel() : gathered_block_numel_;
  // This rank's part: the kept part as it is, or the shard cast to the compute dtypes (and
  // copied to the compute device when offloaded).
  auto write_own = [&](const torch::Tensor& row) {
    if (from_part) {
      row.copy_(group_part_);
    } else {
      write_gathered_block(row);
    }
  };
  if (ahead) {
    // Note [Prefetching a unit]: the backend's own all-gather, on its worker thread.
    pending_source_ = torch::empty({count}, target.options());
    write_own(pending_source_);
    return over.all_gather_into_async(target, pending_source_);
  }
  // This rank's part goes straight into its place; the ring fills the others' in place (Note
  // [Ring all_gather in place]): no staging buffer (and, in the flat layout, no copy out).
  write_own(target.narrow(0, over.rank() * count, count));
  return over.all_gather_chunks_async(target, std::vector<int64_t>(static_cast<size_t>(over.size()), count));
}

void FlatParameter::release_to_group(Communicator& group) {
  if (pending_) finish_prefetch();
  if (!gathered_ || entries_.empty()) return;
  const int64_t parts = group.size(), part_numel = gathered_block_numel_ * world_ / parts;
  VOLT_INTERNAL_ASSERT(world_ % parts == 0 && rank_ % parts == group.rank(),
                       "release_to_group: a group of consecutive ranks dividing the shard group");
  torch::NoGradGuard no_grad;
  const bool rebuilt = layout_ == ShardLayout::PerParameter;
  torch::Tensor gathered = full_;
  if (rebuilt) {
    // The blocks the all-gather filled, rebuilt from the parameters (they were copied out of them).
    gathered = torch::empty({world_, gathered_block_numel_}, full_.options());
    if (gathered_bytes_) gathered_bytes_->add(static_cast<int64_t>(bytes_of(gathered)));
    for (const auto& entry : entries_) {
      const auto columns =
          typed_span(gathered, entry.chunk.gathered_offset, entry.chunk.chunk_numel(), entry.compute_dtype);
      copy_chunks_in(typed_span(full_, entry.offset, entry.numel(), entry.compute_dtype), entry.chunk, columns, 1.0);
    }
  }
  drop_group_part();
  group_part_ = gathered.view({-1}).narrow(0, group.rank() * part_numel, part_numel).clone();
  group_ = &group;
  if (gathered_bytes_) {
    gathered_bytes_->add(static_cast<int64_t>(bytes_of(group_part_)));  // all three alive at this moment
    if (rebuilt) gathered_bytes_->remove(static_cast<int64_t>(bytes_of(gathered)));
  }
  free_gathered();
}

void FlatParameter::drop_group_part() {
  if (!group_part_.defined()) return;
  if (gathered_bytes_) gathered_bytes_->remove(static_cast<int64_t>(bytes_of(group_part_)));
  group_part_ = torch::Tensor();
  group_ = nullptr;
}

void FlatParameter::gather() {
  if (gathered_ || entries_.empty()) return;
  if (!pending_) pending_ = start_gather(/*ahead=*/false);
  finish_prefetch();
}

void FlatParameter::prefetch() {
  if (gathered_ || pending_ || entries_.empty()) return;
  pending_ = start_gather(/*ahead=*/true);
  if (gathered_bytes_) ++gathered_bytes_->prefetches;
}

void FlatParameter::finish_prefetch() {
  auto handle = std::move(*pending_);
  pending_.reset();
  handle.wait();
  pending_source_ = torch::Tensor();
  if (blocks_.defined()) {
    torch::NoGradGuard no_grad;
    copy_blocks_out(blocks_);
    if (gathered_bytes_) gathered_bytes_->remove(static_cast<int64_t>(bytes_of(blocks_)));
    blocks_ = torch::Tensor();
  }
  point_parameters_at(full_);
  gathered_ = true;
  drop_group_part();  // used: the unit is whole again
}

void FlatParameter::release() {
  if (pending_) finish_prefetch();
  drop_group_part();
  free_gathered();
}

void FlatParameter::free_gathered() {
  if (!gathered_ || entries_.empty()) return;
  for (auto& entry : entries_) entry.parameter.set_data(torch::empty({0}, full_.options().dtype(entry.compute_dtype)));
  free_storage(full_);
  gathered_ = false;
  if (gathered_bytes_) gathered_bytes_->remove(static_cast<int64_t>(bytes_of(full_)));
}

int64_t FlatParameter::gathered_bytes() const {
  return full_.defined() ? static_cast<int64_t>(full_.storage().nbytes()) : 0;
}

int64_t FlatParameter::shard_gradient_bytes() const {
  int64_t bytes = 0;
  for (const auto& stepped : stepped_tensors()) {
    if (stepped.grad().defined()) bytes += static_cast<int64_t>(bytes_of(stepped.grad()));
  }
  return bytes;
}

void FlatParameter::write_flat_gradient(torch::Tensor rows, double pre_divide) {
  torch::NoGradGuard no_grad;
  VOLT_INTERNAL_ASSERT(rows.dim() == 2 && rows.size(0) == world_ && rows.size(1) == gradient_shard_numel_,
                       "write_flat_gradient: [world, gradient_numel / world] rows");
  if (layout_ == ShardLayout::PerParameter) {
    for (auto& entry : entries_) {
      if (!entry.trainable) continue;
      auto& grad = entry.parameter.mutable_grad();
      copy_chunks_in(grad.defined() ? grad.reshape({-1}) : grad, entry.chunk,
                     rows.narrow(1, entry.chunk.gradient_offset, entry.chunk.chunk_numel()), pre_divide);
      grad = torch::Tensor();
    }
    return;
  }
  const auto reduce_dtype = rows.scalar_type();
  // Elements [begin, begin + count) of the padded flat gradient, row by row: where they go.
  auto for_each_piece = [&](int64_t begin, int64_t count, const std::function<void(torch::Tensor, int64_t)>& put) {
    for (int64_t done = 0; done < count;) {
      const int64_t index = begin + done, column = index % shard_numel_;
      const int64_t length = std::min(count - done, shard_numel_ - column);
      put(rows[index / shard_numel_].narrow(0, column, length), done);
      done += length;
    }
  };
  // One pass per element: each gradient copied (or, in its own dtype, divided) into its place,
  // zeros only where there is none. A gradient of another dtype is converted first and divided
  // in the reduce dtype, as PyTorch does (the rounding a bfloat16 hook would make).
  for (auto& entry : entries_) {
    auto& grad = entry.parameter.mutable_grad();
    const auto source = grad.defined() ? grad.reshape({-1}) : torch::Tensor();
    for_each_piece(entry.offset, entry.numel(), [&](torch::Tensor place, int64_t from) {
      if (!source.defined()) {
        place.zero_();
      } else if (pre_divide != 1.0 && source.scalar_type() == reduce_dtype) {
        torch::div_out(place, source.narrow(0, from, place.numel()), torch::scalar_tensor(pre_divide, place.options()));
      } else {
        place.copy_(source.narrow(0, from, place.numel()));
        if (pre_divide != 1.0) place.div_(pre_divide);
      }
    });
    grad = torch::Tensor();
  }
  for_each_piece(numel_, padded_numel() - numel_, [](torch::Tensor place, int64_t) { place.zero_(); });
}

void FlatParameter::accumulate_reduced(const torch::Tensor& reduced, double pre_divide) {
  torch::NoGradGuard no_grad;
  // Divided in the reduce dtype, then converted (PyTorch's order). `reduced` is the bucket's, used
  // by nobody after this: the gradient may be (a view of) it.
  const double post_divide = static_cast<double>(gradient_world_) / pre_divide;
  auto mean = post_divide != 1.0 ? reduced / post_divide : reduced;
  mean = mean.to(shard_.device());  // back to the host when offloaded
  auto accumulate = [](torch::Tensor& shard_grad, const torch::Tensor& value) {
    if (shard_grad.defined()) {
      shard_grad.add_(value);
    } else {
      shard_grad = value;
    }
  };
  if (layout_ == ShardLayout::Flat) return accumulate(shard_.mutable_grad(), mean.to(shard_.scalar_type()));
  // Each trainable entry's chunk of the block's gradient prefix, in its shard's shape and dtype.
  for (auto& entry : entries_) {
    if (!entry.trainable) continue;
    accumulate(entry.shard.mutable_grad(), mean.narrow(0, entry.chunk.gradient_offset, entry.chunk.chunk_numel())
                                               .view(entry.shard.sizes())
                                               .to(entry.dtype));
  }
}

void FlatParameter::restore_parameters() {
  if (entries_.empty()) return;
  const auto values = full_parameters();
  release();
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < entries_.size(); ++i) {
    entries_[i].parameter.set_data(
        values[i].to(compute_device_, values[i].scalar_type(), /*non_blocking=*/false, /*copy=*/true));
  }
}

std::vector<torch::Tensor> FlatParameter::full_parameters() const {
  if (entries_.empty()) return {};
  auto gathered = torch::empty({padded_numel()}, shard_.options().requires_grad(false));
  communicator_.all_gather_into(gathered, shard_.detach().contiguous());
  return split_parameters(gathered);
}

std::vector<torch::Tensor> FlatParameter::parameters_gathered_to(int64_t root) const {
  if (entries_.empty()) return {};
  const auto gathered = communicator_.gather(shard_.detach().contiguous(), root);
  if (communicator_.rank() != root) return {};
  return split_parameters(gathered.reshape({-1}));
}

torch::Tensor FlatParameter::gather_shards_to(const torch::Tensor& shard_like, int64_t root) const {
  VOLT_INTERNAL_ASSERT(layout_ == ShardLayout::Flat, "gather_shards_to: the flat layout's shards");
  if (entries_.empty()) return communicator_.rank() == root ? torch::empty({0}, shard_like.options()) : torch::Tensor();
  VOLT_INTERNAL_ASSERT(shard_like.numel() == shard_numel_, "gather_shards_to: a tensor of the shard's size");
  const auto gathered = communicator_.gather(shard_like.detach().contiguous(), root);
  if (communicator_.rank() != root) return {};
  return gathered.reshape({-1}).narrow(0, 0, numel_);
}

std::vector<torch::Tensor> FlatParameter::split_parameters(const torch::Tensor& gathered) const {
  std::vector<torch::Tensor> out;
  if (layout_ == ShardLayout::Flat) {
    for (const auto& entry : entries_) out.push_back(gathered.narrow(0, entry.offset, entry.numel()).view(entry.shape));
    return out;
  }
  const auto rows = gathered.view({world_, shard_numel_});
  for (const auto& entry : entries_) {
    auto value = torch::empty(entry.shape, gathered.options().dtype(entry.dtype));
    copy_chunks_out(typed_span(rows, entry.chunk.offset, entry.chunk.chunk_numel(), entry.dtype), entry.chunk, value);
    out.push_back(std::move(value));
  }
  return out;
}

double gradient_pre_divide_factor(int64_t world) {
  int64_t factor = 1;
  while (world % factor == 0 && world / factor > factor) factor *= 2;
  return static_cast<double>(factor);
}

}  // namespace volt::fsdp
