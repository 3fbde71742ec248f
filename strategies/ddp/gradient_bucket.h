#pragma once
// The flat buffers DDP reduces. A GradientBucket holds one contiguous buffer for a group of
// parameters (bucket_assignment.h) and, per member, the view of the buffer that mirrors its
// gradient. Gradients get into the buffer either by a copy when the parameter becomes ready, or,
// with gradient_as_bucket_view, by being those views in the first place (autograd then
// accumulates straight into the buffer, and no copy happens either way).
//
// Not thread-safe; owned by the Reducer.
#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace volt::ddp {

class GradientBucket {
 public:
  // A zeroed buffer for `members` (indices into `parameters`, same dtype and device): `buffer`
  // where given (flat, zeroed, of their dtype, device and total size: the communicator's
  // allocate_buffers), else a new one.
  GradientBucket(const std::vector<torch::Tensor>& parameters, std::vector<size_t> members,
                 torch::Tensor buffer = {});
  // The elements of a buffer for `members`.
  static int64_t numel_of(const std::vector<torch::Tensor>& parameters, const std::vector<size_t>& members);

  const torch::Tensor& buffer() const { return buffer_; }
  torch::Tensor& buffer() { return buffer_; }
  const std::vector<size_t>& members() const { return members_; }
  size_t size() const { return members_.size(); }
  // Bytes of the buffer.
  int64_t bytes() const { return buffer_.numel() * static_cast<int64_t>(buffer_.element_size()); }
  // The slot of member `slot`, shaped like its parameter.
  const torch::Tensor& view(size_t slot) const { return views_.at(slot); }

  // Puts `parameter`'s current gradient into its slot: a copy, nothing when the gradient already
  // is the slot's view, zeros when it has none.
  void copy_in(size_t slot, const torch::Tensor& parameter);
  // Gives `parameter` the reduced value of its slot: as its gradient's new value (a copy into
  // the existing gradient, or a fresh tensor when it has none).
  void copy_out(size_t slot, torch::Tensor& parameter) const;
  // Makes `parameter`'s gradient the slot's view, carrying over the value it had (zeros if none).
  void attach_view(size_t slot, torch::Tensor& parameter);
  // Whether `parameter`'s gradient is the slot's view (storage and offset).
  bool is_view_of_slot(size_t slot, const torch::Tensor& parameter) const;

 private:
  torch::Tensor buffer_;
  std::vector<size_t> members_;
  std::vector<torch::Tensor> views_;
};

}  // namespace volt::ddp
