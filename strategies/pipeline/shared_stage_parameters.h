#pragma once
// Note [Parameters shared across stages]
// A layer may read a parameter that another layer registers: a GPT's output projection is the
// token embedding's weight (tied), so the first stage and the last both compute with it. The
// model names such reads (PipelineModel::pipeline_shared_parameters); the parameter's owner is the
// stage whose layer registers it, and every other stage that reads it keeps a copy (Megatron-LM's
// shared embedding across its first and last pipeline stages).
//
// Each stage holding it computes a part of its gradient; the model's gradient is their sum. At
// each synchronization (outside no_sync(), before the `dp` average) the holders exchange their
// parts and each sums them in stage order, so every holder ends with the same bits (one process
// sums the same parts, though in its backward's order: the last bits can differ). The owner's
// optimizer steps it (its stage's parameters); before the first forward after an optimizer step
// the owner sends the value to the other holders, so a copy is never behind when read (steps
// inside an accumulation window, where no optimizer stepped, send nothing).
// Checkpoints write the owner's value under the owner's name; a load and the end of a run set the
// copies from the whole model too.
#include <torch/torch.h>

#include <vector>

#include "distributed/communicator.h"

namespace volt::pipeline {

class SharedStageParameters {
 public:
  struct Shared {
    torch::Tensor parameter;
    std::string name;             // the parameter's name in the module
    std::vector<int64_t> stages;  // the stages holding it, ascending; the owner's among them
    int64_t owner = 0;            // the stage whose layer registers it
  };

  // `shared`: every parameter read by a stage other than its owner's; `group`: the pipeline's
  // ranks in stage order (this stage is its rank).
  SharedStageParameters(std::vector<Shared> shared, Communicator& group);

  const std::vector<Shared>& shared() const { return shared_; }
  // The parameters this stage keeps though another stage owns them.
  std::vector<torch::Tensor> copies() const;
  // Every holder's part of each shared gradient, summed in stage order, on every holder (a part
  // not computed counts as zeros). [point to point among the holders]
  void sum_gradients();
  // The owners' values changed (an optimizer step, a load): the next refresh_copies sends them.
  void values_changed() { stale_ = true; }
  // The owner's value of each shared parameter into the other holders' copies, if it changed
  // since the last refresh (every rank decides alike: values_changed is called on every rank).
  // [point to point from the owners]
  void refresh_copies();

 private:
  bool holds(const Shared& shared) const;
  std::vector<Shared> shared_;
  Communicator& group_;
  bool stale_ = true;  // the copies have not been sent the owners' values yet
};

}  // namespace volt::pipeline
