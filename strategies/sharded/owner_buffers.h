#pragma once
// Note [Owner-ordered parameter buffers]: after OSS's step every rank holds the new values of its
// own parameters only, and every rank needs all of them. OSS keeps the parameters it partitions
// as views into flat buffers (one per dtype and device) laid out by owner: rank 0's parameters,
// then rank 1's, and so on. Each rank's updated parameters are then one contiguous chunk, and one
// Communicator::all_gather_chunks per buffer (a ring that writes every chunk straight into its
// place, Note [Ring all_gather in place]) gives every rank the whole model: no packing, no
// unpacking, every link busy at once, where one broadcast per owner (PyTorch's
// ZeroRedundancyOptimizer) sends the same bytes one owner after the other. fairscale's OSS keeps
// per-rank flat buffers for the same reason.
//
// The parameters keep their TensorImpl (set_data), so optimizers, reducers, gradient accumulators
// and the module's members stay valid; only their storage moves into the buffer. Something that
// later gives a parameter a storage of its own (module->to(another dtype)) would leave the buffer
// behind: synchronize() checks for it and refuses. Not thread-safe.
#include <torch/torch.h>

#include <vector>

#include "distributed/communicator.h"

namespace volt {

class OwnerBuffers {
 public:
  // `owned[r]`: the parameters rank r owns, in the order they are laid out in its chunk (the same
  // lists on every rank). Copies their values into the buffers and points each parameter at its
  // place.
  explicit OwnerBuffers(const std::vector<std::vector<torch::Tensor>>& owned);

  // Every owner's parameters to every rank, one all_gather_chunks per buffer. With `fp16`, a
  // floating-point buffer travels as float16 and every rank, the owner too, keeps the rounded
  // values, so that ranks stay identical. Throws InternalError when a parameter no longer views
  // its buffer. [collective]
  void synchronize(Communicator& communicator, bool fp16);

  // Bytes of the buffers (the parameters' own bytes: they are views).
  int64_t bytes() const;

 private:
  struct Place {
    torch::Tensor parameter;
    const void* data = nullptr;  // where its values must be
  };
  struct Buffer {
    torch::Tensor flat;
    std::vector<int64_t> counts;  // elements per rank
    std::vector<Place> places;
  };
  std::vector<Buffer> buffers_;
};

}  // namespace volt
