#pragma once
// Note [A stage's share of the model]
// Under the pipeline strategy every rank builds the whole module (configure_model runs on each),
// then keeps only its stage's: the parameters of the other stages are released to empty tensors,
// so that parameters, gradients and optimizer state per rank are its stage's. The module keeps
// every name and every parameter object (optimizers built over module.parameters() still refer to
// them; they never get a gradient here, so they are never stepped). Buffers stay whole on every
// rank, but only the stage that runs a buffer's module updates it, so each is read from its owner.
// Entries outside the pipeline's layers (buffers only: every parameter must be in a layer) belong
// to the first stage. A parameter another stage owns but this one reads (Note [Parameters shared
// across stages]) is a copy: kept, never written to a checkpoint from here, set from the whole
// model at a load and at the end of a run.
//
// A checkpoint gathers each rank's owned entries (owned_state) to the rank that writes; a load
// copies into the owned entries only; the end of a run restores the released ones.
#include <torch/torch.h>

#include <set>
#include <string>
#include <vector>

#include "core/state_dict.h"

namespace volt::pipeline {

class StageOwnership {
 public:
  // `layers`: the module's pipeline layers; `stage`: this rank's entries of them (their tensors are
  // the module's); `first_stage`: whether this rank also owns what lies outside the layers;
  // `copies`: parameters of other stages this one keeps.
  StageOwnership(torch::nn::Module& module, const torch::nn::Sequential& layers, const torch::nn::Sequential& stage,
                 bool first_stage, const std::vector<torch::Tensor>& copies = {});

  bool owns(const torch::Tensor& tensor) const { return owned_.count(tensor.unsafeGetTensorImpl()) > 0; }
  // Releases every parameter this rank neither owns nor copies (its data becomes an empty tensor of its
  // dtype and device), remembering its shape. Idempotent.
  void release();
  bool released() const { return !released_.empty(); }
  // The shape `parameter` (named `name`) has whole: its own unless released.
  std::vector<int64_t> whole_shape(const std::string& name, const torch::Tensor& parameter) const;
  // This rank's parameters and buffers under the module's names, in the module's order, detached.
  StateDict owned_state() const;
  // Puts the released parameters back from `whole` (every name of the module), as new tensors
  // holding those values, and copies its values into the copies; nothing is released afterwards.
  void restore(const StateDict& whole);
  // Copies `state` (a whole model's) into this rank's entries in place. Every name is checked
  // (strict: both ways) and every shape, released parameters' against their whole shape; throws
  // CheckpointError naming `source` and the keys.
  void load(const StateDict& state, bool strict, const std::string& source) const;

 private:
  struct Released {
    std::string name;
    torch::Tensor parameter;
    std::vector<int64_t> shape;
  };
  const Released* released_entry(const std::string& name) const;

  torch::nn::Module& module_;
  std::set<const void*> owned_;   // TensorImpls of the owned parameters and buffers
  std::set<const void*> copies_;  // TensorImpls of other stages' parameters kept here
  std::vector<Released> released_;
};

}  // namespace volt::pipeline
