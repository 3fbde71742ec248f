#pragma once
#include <torch/torch.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "data/batch.h"

namespace volt {

// One sample of a SampleDataset: its tensors without the batch dimension (an image C×H×W, a label
// as a 0-dim tensor, ...). A collate function turns the samples of a batch into a Batch.
struct Sample {
  torch::Tensor input;
  torch::Tensor target;
  std::map<std::string, torch::Tensor> extras;
};

// Turns the samples of one batch, in batch order, into a Batch. Runs on the loader's worker
// threads (DataLoaderOptions::collate), several at once: it must not touch shared state unguarded.
using CollateFunction = std::function<Batch(std::vector<Sample>&& samples)>;

// torch.utils.data.default_collate for tensors: each field stacked along a new first dimension
// (a 0-dim target becomes a vector). Every sample must have the same fields, shapes and dtypes;
// a DataError names the first sample that differs and how.
Batch default_collate(std::vector<Sample>&& samples);

// default_collate writing the stacked tensors straight into page-locked memory (the loader's
// pin_memory), so that no second copy is needed before an asynchronous upload.
Batch default_collate_pinned(std::vector<Sample>&& samples);

}  // namespace volt
