#pragma once
// What a module gives the `pipeline` strategy (Note [The pipeline strategy] in
// pipeline_strategy.h): itself as one Sequential of layers run in order, and the loss of the last
// layer's output. A volt::Module opts in by implementing it beside its steps:
//
//   class Net : public volt::Module, public volt::pipeline::PipelineModel {
//     torch::nn::Sequential layers = register_module("layers", torch::nn::Sequential(...));
//     torch::nn::Sequential pipeline_layers() override { return layers; }
//     torch::Tensor pipeline_loss(const torch::Tensor& output, const torch::Tensor& target) override {
//       return torch::mse_loss(output, target);
//     }
//     torch::Tensor training_step(const volt::Batch& b, int64_t) override {
//       return pipeline_loss(layers->forward(b.input), b.target);  // what every other strategy runs
//     }
//   };
//
// A layer that also reads a parameter another layer registers (a tied output projection reading
// the token embedding's weight) names it in pipeline_shared_parameters(): its stage then keeps a
// copy (Note [Parameters shared across stages]). The parameter must not be registered in the
// reading layer too: optimizers built over module.parameters() would step it twice.
//
// Under `pipeline` the Trainer's training step is the schedule over these two: training_step is
// not called (it runs the whole model, which no rank holds).
#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace volt::pipeline {

// A parameter that pipeline layer `layer` reads but does not register: another layer does.
struct SharedParameter {
  int64_t layer = 0;
  torch::Tensor parameter;
};

class PipelineModel {
 public:
  virtual ~PipelineModel() = default;
  // The model's layers in forward order, registered in the module: every parameter of the module
  // must be in one of them. Each entry takes one tensor and returns one.
  virtual torch::nn::Sequential pipeline_layers() = 0;
  // One micro-batch's loss, on the last stage: from the last layer's output and the micro-batch's
  // rows of the batch's target. The strategy averages it over the micro-batches.
  virtual torch::Tensor pipeline_loss(const torch::Tensor& output, const torch::Tensor& target) = 0;
  // The first entry of every one of `stages` stages (begins at 0, increasing); empty, the
  // default: balanced by parameter count (balanced_stage_starts).
  virtual std::vector<int64_t> pipeline_split(int64_t stages) { return {}; }
  // The parameters layers read besides their own; empty, the default: none.
  virtual std::vector<SharedParameter> pipeline_shared_parameters() { return {}; }
};

}  // namespace volt::pipeline
