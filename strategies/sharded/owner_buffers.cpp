// See Note [Owner-ordered parameter buffers] in owner_buffers.h.
#include "strategies/sharded/owner_buffers.h"

#include "core/error.h"

namespace volt {

OwnerBuffers::OwnerBuffers(const std::vector<std::vector<torch::Tensor>>& owned) {
  torch::NoGradGuard no_grad;
  const size_t ranks = owned.size();
  // One buffer per (dtype, device), in the order they first appear: the same on every rank.
  std::vector<torch::TensorOptions> kinds;
  auto kind_of = [&](const torch::Tensor& p) {
    for (size_t k = 0; k < kinds.size(); ++k) {
      if (kinds[k].dtype() == p.dtype() && kinds[k].device() == p.device()) return k;
    }
    kinds.push_back(p.options().requires_grad(false));
    buffers_.push_back(Buffer{torch::Tensor(), std::vector<int64_t>(ranks, 0), {}});
    return kinds.size() - 1;
  };
  for (size_t r = 0; r < ranks; ++r) {
    for (const auto& p : owned[r]) buffers_[kind_of(p)].counts[r] += p.numel();
  }
  for (size_t k = 0; k < buffers_.size(); ++k) {
    auto& buffer = buffers_[k];
    int64_t total = 0;
    for (const int64_t count : buffer.counts) total += count;
    buffer.flat = torch::empty({total}, kinds[k]);
  }
  std::vector<int64_t> offsets(buffers_.size(), 0);
  for (size_t r = 0; r < ranks; ++r) {
    for (const auto& p : owned[r]) {
      const auto k = kind_of(p);
      auto place = buffers_[k].flat.narrow(0, offsets[k], p.numel()).view(p.sizes());
      offsets[k] += p.numel();
      place.copy_(p);
      auto parameter = p;  // the same TensorImpl: set_data changes what every holder sees
      parameter.set_data(place);
      buffers_[k].places.push_back(Place{parameter, place.data_ptr()});
    }
  }
}

void OwnerBuffers::synchronize(Communicator& communicator, bool fp16) {
  torch::NoGradGuard no_grad;
  for (auto& buffer : buffers_) {
    for (const auto& place : buffer.places) {
      check<InternalError>(place.parameter.data_ptr() == place.data, "OSS: a parameter of shape ",
                           place.parameter.sizes(), " was given new storage after OSS laid it out (e.g. module->to() "
                           "after the optimizer was sharded); its updates would not reach the other ranks. Convert "
                           "or move the module before building the optimizer");
    }
    const bool compress = fp16 && buffer.flat.is_floating_point() && buffer.flat.scalar_type() != torch::kHalf;
    if (!compress) {
      communicator.all_gather_chunks(buffer.flat, buffer.counts);
      continue;
    }
    auto wire = buffer.flat.to(torch::kHalf);
    communicator.all_gather_chunks(wire, buffer.counts);
    buffer.flat.copy_(wire);
  }
}

int64_t OwnerBuffers::bytes() const {
  int64_t total = 0;
  for (const auto& buffer : buffers_) total += static_cast<int64_t>(buffer.flat.nbytes());
  return total;
}

}  // namespace volt
