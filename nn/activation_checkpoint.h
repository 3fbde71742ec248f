#pragma once
// Activation checkpointing (torch.utils.checkpoint): run part of a forward without keeping its
// activations, and run it again in the backward to get them. A block's saved activations shrink
// to its inputs, for one more forward of the block in the backward.
//
//   torch::Tensor forward(torch::Tensor x) {
//     for (auto& block : blocks_) x = volt::checkpoint(block, x);   // any forward of tensors
//     return head_(x);
//   }
//
// Note [Recomputed forwards]: the recompute sees what the first forward saw, so that it computes
// the same values: the random generators' states (dropout draws the same mask: CPU's and those of
// the CUDA devices the inputs and parameters are on) and the autocast state (enabled and dtype per
// device type). Around the recompute the generators are put back as they were, so the rest of the
// backward and the next step draw as they would have without checkpointing. Gradients reach the
// parameters through this node, not by a second backward inside it: the engine accumulates them
// and fires their accumulators' hooks (DDP's, FSDP's) as it would without checkpointing. A
// function must depend on nothing that requires a gradient besides its inputs and the parameters
// it is given; the backward checks that and fails naming what to pass. Autocast's cache is off
// while the function runs (a cast made without recording must not be reused by the recompute).
// Side effects of the forward run twice;
// checkpoint(module, ...) puts the module's buffers back after the recompute, so BatchNorm's
// running statistics move once per step. Gradients come through backward(); torch::autograd::grad
// works too. The recompute happens in the backward, so a forward under NoGradGuard checkpoints
// nothing (and keeps nothing).
#include <torch/torch.h>

#include <functional>
#include <vector>

namespace volt {

struct CheckpointOptions {
  // Recompute with the random states of the first forward (dropout draws the same mask).
  bool preserve_rng_state = true;
};

using CheckpointedFunction = std::function<std::vector<torch::Tensor>(const std::vector<torch::Tensor>& inputs)>;

// fn(inputs) without keeping its activations. `parameters` are the tensors fn reads that are not
// inputs and may need gradients (a module's parameters); the outputs' gradients reach them and
// the inputs. `buffers`: tensors the recompute may modify (BatchNorm's running statistics), put
// back as the first forward left them.
std::vector<torch::Tensor> checkpoint(const CheckpointedFunction& fn, const std::vector<torch::Tensor>& inputs,
                                      const std::vector<torch::Tensor>& parameters,
                                      const std::vector<torch::Tensor>& buffers = {},
                                      CheckpointOptions options = {});

// module->forward(inputs...) checkpointed, for a module (a ModuleHolder such as Block, or a
// shared_ptr to one; kept alive until the backward) whose forward takes tensors and returns a tensor.
template <typename Module, typename... Tensors>
torch::Tensor checkpoint(Module& module, const Tensors&... inputs) {
  static_assert((std::is_convertible_v<Tensors, torch::Tensor> && ...),
                "volt::checkpoint(module, ...): tensors only; capture other arguments in a lambda and call "
                "checkpoint(fn, inputs, parameters)");
  // A copy of the handle, not a reference: the recompute runs in the backward, after the caller's
  // variable is gone.
  auto fn = [module](const std::vector<torch::Tensor>& given) mutable {
    return [&]<size_t... I>(std::index_sequence<I...>) {
      return std::vector<torch::Tensor>{module->forward(given[I]...)};
    }(std::index_sequence_for<Tensors...>{});
  };
  return checkpoint(fn, {inputs...}, module->parameters(), module->buffers()).front();
}

}  // namespace volt
