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
    : module_(std::move(module)), group_(group), device_(device) {}

void PipelineStage::send_header(const torch::Tensor& activation) {
  check<ConfigurationError>(activation.dim() <= kMaxDimensions, "pipeline: stage ", stage(), "'s output has ",
                            activation.dim(), " dimensions; a stage's output has at most ", kMaxDimensions);
  auto header = torch::zeros({2 + kMaxDimensions}, torch::kLong);
  header[0] = static_cast<int64_t>(activation.scalar_type());
  header[1] = activation.dim();
  for (int64_t d = 0; d < activation.dim(); ++d) header[2 + d] = activation.size(d);
  group_.send(header, stage() + 1);
}

torch::Tensor PipelineStage::receive_like_header() {
  auto header = torch::zeros({2 + kMaxDimensions}, torch::kLong);
  group_.recv(header, stage() - 1);
  const auto dtype = static_cast<torch::Dtype>(header[0].item<int64_t>());
  std::vector<int64_t> shape;
  for (int64_t d = 0; d < header[1].item<int64_t>(); ++d) shape.push_back(header[2 + d].item<int64_t>());
  return torch::empty(shape, torch::TensorOptions().dtype(dtype).device(device_));
}

torch::Tensor PipelineStage::run(PipelineSchedule schedule, int64_t microbatches,
                                 const std::vector<torch::Tensor>& inputs, const std::vector<torch::Tensor>& targets,
                                 const PipelineLoss& loss, const ForwardScope& forward_scope) {
  check<ConfigurationError>(microbatches >= 1, "pipeline: microbatches=", microbatches, "; at least one");
  check<ConfigurationError>(!is_first() || static_cast<int64_t>(inputs.size()) == microbatches, "pipeline: the first ",
                            "stage got ", inputs.size(), " inputs for ", microbatches, " micro-batches");
  check<ConfigurationError>(!is_last() || static_cast<int64_t>(targets.size()) == microbatches, "pipeline: the last ",
                            "stage got ", targets.size(), " targets for ", microbatches, " micro-batches");
  const auto actions = stage_actions(schedule, stage(), stages(), microbatches);
  const auto started = Clock::now();
  report_ = StageStepReport{};
  report_.peak_microbatches_held = peak_microbatches_held(actions);
  std::map<int64_t, HeldMicrobatch> held;
  std::vector<std::pair<CollectiveHandle, torch::Tensor>> sends;  // waited for at the end, their tensors kept alive
  torch::Tensor incoming, outgoing;                               // micro-batch 0's activations: the shape of every one
  torch::Tensor loss_sum;
  const double scale = 1.0 / static_cast<double>(microbatches);
  for (const auto& action : actions) {
    const int64_t i = action.microbatch;
    if (action.kind == PipelineAction::Kind::Forward) {
      torch::Tensor input;
      if (is_first()) {
        input = inputs[static_cast<size_t>(i)];
      } else {
        if (!incoming.defined()) incoming = receive_like_header();
        input = torch::empty_like(incoming);
        group_.recv(input, stage() - 1);
        input.set_requires_grad(true);
      }
      const auto busy_from = Clock::now();
      torch::Tensor output;
      {
        ScopeGuard scope = forward_scope ? forward_scope() : ScopeGuard{};
        output = module_->forward(input);
        if (is_last()) output = loss(output, targets[static_cast<size_t>(i)]) * scale;
      }
      if (is_last()) loss_sum = loss_sum.defined() ? loss_sum + output.detach() : output.detach();
      report_.busy_seconds += seconds_between(busy_from, Clock::now());
      if (!is_last()) {
        if (!outgoing.defined()) {
          outgoing = output;
          send_header(output);
        }
        check<ConfigurationError>(output.sizes() == outgoing.sizes() && output.scalar_type() == outgoing.scalar_type(),
                                  "pipeline: stage ", stage(), "'s output for micro-batch ", i, " has shape ",
                                  output.sizes(), ", micro-batch 0's ", outgoing.sizes(),
                                  "; cut the batch into micro-batches of one size");
        auto sent = output.detach().contiguous();
        sends.emplace_back(group_.send_async(sent, stage() + 1), sent);
      }
      held[i] = {input, output};
      continue;
    }
    auto it = held.find(i);
    VOLT_INTERNAL_ASSERT(it != held.end(), "pipeline: a backward after its forward");
    auto& [input, output] = it->second;
    torch::Tensor gradient;
    if (!is_last()) {
      gradient = torch::empty(output.sizes(), output.options().requires_grad(false));
      group_.recv(gradient, stage() + 1);
    }
    const auto busy_from = Clock::now();
    if (is_last()) {
      output.backward();
    } else {
      output.backward(gradient);
    }
    report_.busy_seconds += seconds_between(busy_from, Clock::now());
    if (!is_first()) {
      auto sent = input.grad().defined() ? input.grad().contiguous() : torch::zeros_like(input);
      sends.emplace_back(group_.send_async(sent, stage() - 1), sent);
    }
    held.erase(it);
  }
  for (auto& [handle, tensor] : sends) handle.wait();
  report_.seconds = seconds_between(started, Clock::now());
  return loss_sum;
}

}  // namespace volt::pipeline
