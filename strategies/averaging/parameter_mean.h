#pragma once
// The mean of parameters over a process group, in place: PyTorch's
// model_averaging.utils.average_parameters, exactly: flatten, divide by the group's size, then sum
// over the group (divide first, like DDP's all-reduce hook), and copy the mean back into the
// parameters' own storage (so optimizers keep referring to the same tensors). One all_reduce per
// dtype (PyTorch packs mixed dtypes into one buffer of the promoted type; here each keeps its own).
#include <torch/torch.h>

#include <vector>

#include "distributed/communicator.h"

namespace volt::averaging {

// Replaces each of `parameters` by its mean over `group`; a group of one process leaves them
// unchanged without communicating. Every rank of `group` passes tensors of the same shapes and
// dtypes in the same order. [collective over `group`]
void replace_by_mean(const std::vector<torch::Tensor>& parameters, Communicator& group);

}  // namespace volt::averaging
