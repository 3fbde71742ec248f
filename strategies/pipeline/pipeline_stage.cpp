#include "strategies/pipeline/pipeline_stage.h"

#include <chrono>
#include <map>

#include "core/error.h"

namespace volt::pipeline {

namespace {

using Clock = std::chrono::steady_clock;

// Header: [dtype, dimensions, size 0, ..., size 7].
constexpr int64_t kMaxDimensions = 8;

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// What a forward keeps for its backward.
struct HeldMicrobatch {
  torch::Tensor input;   // requires grad on every stage but the first
  torch::Tensor output;  // the stage's output, or on the last stage the micro-batch's loss / M
};

}  // namespace

PipelineStage::PipelineStage(torch::nn::Sequential module, Communicator& group, torch::Device device)
    : chunks_{std::move(module)}, group_(group), gradients_(group), device_(device) {}

PipelineStage::PipelineStage(std::vector<torch::nn::Sequential> chunks, Communicator& group, Communicator& gradients,
                             torch::Device device)
    : chunks_(std::move(chunks)), group_(group), gradients_(gradients), device_(device) {
  VOLT_INTERNAL_ASSERT(!chunks_.empty(), "pipeline: a stage of no chunks");
  VOLT_INTERNAL_ASSERT(gradients_.size() == group_.size() && gradients_.rank() == group_.rank(),
                       "pipeline: the gradients' group is not the stages' ranks");
}

std::vector<torch::Tensor> PipelineStage::parameters() const {
  std::vector<torch::Tensor> all;
  for (const auto& chunk : chunks_) {
    for (const auto& p : chunk->parameters()) all.push_back(p);
  }
  return all;
}

void PipelineStage::send_header(const torch::Tensor& activation, int64_t chunk) {
  check<ConfigurationError>(activation.dim() <= kMaxDimensions, "pipeline: stage ", chunk * stages() + stage(),
                            "'s output has ", activation.dim(), " dimensions; a stage's output has at most ",
                            kMaxDimensions);
  auto header = torch::zeros({2 + kMaxDimensions}, torch::kLong);
  header[0] = static_cast<int64_t>(activation.scalar_type());
  header[1] = activation.dim();
  for (int64_t d = 0; d < activation.dim(); ++d) header[2 + d] = activation.size(d);
  group_.send(header, next_rank());
}

torch::Tensor PipelineStage::receive_like_header() {
  auto header = torch::zeros({2 + kMaxDimensions}, torch::kLong);
  group_.recv(header, previous_rank());
  const auto dtype = static_cast<torch::Dtype>(header[0].item<int64_t>());
  std::vector<int64_t> shape;
  for (int64_t d = 0; d < header[1].item<int64_t>(); ++d) shape.push_back(header[2 + d].item<int64_t>());
  return torch::empty(shape, torch::TensorOptions().dtype(dtype).device(device_));
}

torch::Tensor PipelineStage::run(PipelineSchedule schedule, int64_t microbatches,
                                 const std::vector<torch::Tensor>& inputs, const std::vector<torch::Tensor>& targets,
                                 const PipelineLoss& loss, const ForwardScope& forward_scope) {
  check<ConfigurationError>(!is_first() || static_cast<int64_t>(inputs.size()) == microbatches, "pipeline: the first ",
                            "stage got ", inputs.size(), " inputs for ", microbatches, " micro-batches");
  check<ConfigurationError>(!is_last() || static_cast<int64_t>(targets.size()) == microbatches, "pipeline: the last ",
                            "stage got ", targets.size(), " targets for ", microbatches, " micro-batches");
  // Refuses sizes the schedule cannot run (check_schedule_sizes).
  const auto actions = stage_actions(schedule, stage(), stages(), microbatches, chunks());
  const auto started = Clock::now();
  report_ = StageStepReport{};
  report_.peak_microbatches_held = peak_microbatches_held(actions);
  std::map<std::pair<int64_t, int64_t>, HeldMicrobatch> held;     // by (chunk, micro-batch)
  std::vector<std::pair<CollectiveHandle, torch::Tensor>> sends;  // waited for at the end, their tensors kept alive
  // Per chunk, micro-batch 0's activations: the shape of every one.
  std::vector<torch::Tensor> incoming(chunks_.size()), outgoing(chunks_.size());
  torch::Tensor loss_sum;
  const double scale = 1.0 / static_cast<double>(microbatches);
  for (const auto& action : actions) {
    const int64_t i = action.microbatch, v = action.chunk;
    const auto c = static_cast<size_t>(v);
    if (action.kind == PipelineAction::Kind::Forward) {
      torch::Tensor input;
      if (first_stage(v)) {
        input = inputs[static_cast<size_t>(i)];
      } else {
        if (!incoming[c].defined()) incoming[c] = receive_like_header();
        input = torch::empty_like(incoming[c]);
        group_.recv(input, previous_rank());
        input.set_requires_grad(true);
      }
      const auto busy_from = Clock::now();
      torch::Tensor output;
      {
        ScopeGuard scope = forward_scope ? forward_scope() : ScopeGuard{};
        output = chunks_[c]->forward(input);
        if (last_stage(v)) output = loss(output, targets[static_cast<size_t>(i)]) * scale;
      }
      if (last_stage(v)) loss_sum = loss_sum.defined() ? loss_sum + output.detach() : output.detach();
      report_.busy_seconds += seconds_between(busy_from, Clock::now());
      if (!last_stage(v)) {
        if (!outgoing[c].defined()) {
          outgoing[c] = output;
          send_header(output, v);
        }
        const auto& first = outgoing[c];
        check<ConfigurationError>(output.sizes() == first.sizes() && output.scalar_type() == first.scalar_type(),
                                  "pipeline: stage ", v * stages() + stage(), "'s output for micro-batch ", i,
                                  " has shape ", output.sizes(), ", micro-batch 0's ", first.sizes(),
                                  "; cut the batch into micro-batches of one size");
        auto sent = output.detach().contiguous();
        sends.emplace_back(group_.send_async(sent, next_rank()), sent);
      }
      held[{v, i}] = {input, output};
      continue;
    }
    auto it = held.find({v, i});
    VOLT_INTERNAL_ASSERT(it != held.end(), "pipeline: a backward after its forward");
    auto& [input, output] = it->second;
    torch::Tensor gradient;
    if (!last_stage(v)) {
      gradient = torch::empty(output.sizes(), output.options().requires_grad(false));
      gradients_.recv(gradient, next_rank());
    }
    const auto busy_from = Clock::now();
    if (!output.requires_grad()) {
      // Nothing before it needs a gradient: the first stage's entries have no parameters (a
      // dropout on the inputs) and its input is data.
    } else if (last_stage(v)) {
      output.backward();
    } else {
      output.backward(gradient);
    }
    report_.busy_seconds += seconds_between(busy_from, Clock::now());
    if (!first_stage(v)) {
      auto sent = input.grad().defined() ? input.grad().contiguous() : torch::zeros_like(input);
      sends.emplace_back(gradients_.send_async(sent, previous_rank()), sent);
    }
    held.erase(it);
  }
  for (auto& [handle, tensor] : sends) handle.wait();
  report_.seconds = seconds_between(started, Clock::now());
  return loss_sum;
}

}  // namespace volt::pipeline
