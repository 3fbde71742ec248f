#pragma once
// Precisions by name (`--precision NAME`, TrainerOptions::precision): 32-true, 64-true,
// bf16-mixed, 16-mixed, bf16-true, 16-true, and Lightning's short aliases 32, 64, 16, bf16.
// make_precision(), canonical_precision_name() and precision_names() (precision.h) resolve
// through this registry. A user adds their own before building a Trainer:
//   precision_registry().add("my-precision", "what it does",
//                            [](const torch::Device& device) { return std::make_shared<MyPrecision>(device); });
// Its Precision::name() must return the registered name. Not thread-safe: register at start-up.
#include <torch/torch.h>

#include "core/registry.h"
#include "precision/precision.h"

namespace volt {

using PrecisionRegistry = Registry<Precision, const torch::Device&>;

PrecisionRegistry& precision_registry();

}  // namespace volt
