#pragma once
// A collective run on a copy of its tensor on another device, its result brought back to the
// caller's: the blocking collectives' CPU tensors on a device's backend (Note [CPU tensors on a
// device's backend], communicator.cpp) and a CUDA tensor on Gloo (Note [Device tensors on Gloo],
// host_staged_communicator.cpp). Each caller decides which tensors it stages and where to; how a
// staged collective copies there and back is this one place.
#include <torch/torch.h>

#include <optional>
#include <utility>

#include "distributed/collective_handle.h"

namespace volt::staging {

// `tensor` on `device` when given (a copy, which waits for the kernels that wrote it), else itself.
inline torch::Tensor on(const torch::Tensor& tensor, std::optional<torch::Device> device) {
  return device ? tensor.to(*device) : tensor;
}

// Runs `collective` on `tensor`, or, when `device` is given, on a copy there (its contents copied
// only when `read`: an output-only tensor is not) whose result the returned handle's wait() copies
// back into `tensor`.
template <typename Collective>
CollectiveHandle in_place(const torch::Tensor& tensor, std::optional<torch::Device> device, bool read,
                          Collective&& collective) {
  if (!device) return collective(tensor);
  auto work = read ? tensor.to(*device) : torch::empty_like(tensor, tensor.options().device(*device));
  return collective(work).then([tensor, work](const torch::Tensor&) {
    tensor.copy_(work);
    return tensor;
  });
}

// `handle`, whose collective ran on a staged copy when `staged`, returning its result on `like`'s
// device.
inline CollectiveHandle returned_on(const torch::Tensor& like, bool staged, CollectiveHandle handle) {
  if (!staged) return handle;
  return std::move(handle).then(
      [device = like.device()](const torch::Tensor& result) { return result.defined() ? result.to(device) : result; });
}

}  // namespace volt::staging
