#include "nn/activation_checkpoint.h"

#include <ATen/Context.h>
#include <ATen/SequenceNumber.h>
#include <ATen/autocast_mode.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <mutex>
#include <unordered_set>
#include <utility>

#include "core/compat.h"
#include "core/error.h"
#include "core/scope_guard.h"

namespace volt {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The default generators of `devices` (CPU first), each with its state.
struct GeneratorStates {
  std::vector<std::pair<at::Generator, torch::Tensor>> states;

  static GeneratorStates of(const std::vector<torch::Device>& devices) {
    GeneratorStates out;
    for (const auto& device : devices) {
      at::Generator generator = device.is_cpu() ? at::detail::getDefaultCPUGenerator()
                                                : at::globalContext().defaultGenerator(device);
      std::lock_guard<std::mutex> lock(generator.mutex());
      out.states.emplace_back(generator, generator.get_state());
    }
    return out;
  }

  void restore() const {
    for (const auto& [generator, state] : states) {
      at::Generator g = generator;
      std::lock_guard<std::mutex> lock(g.mutex());
      g.set_state(state);
    }
  }
};

// Autocast's enabled flag and dtype for the two device types volt runs on.
struct AutocastState {
  struct One {
    c10::DeviceType type;
    bool enabled;
    c10::ScalarType dtype;
  };
  std::vector<One> devices;

  static AutocastState now() {
    AutocastState out;
    for (auto type : {c10::DeviceType::CPU, c10::DeviceType::CUDA}) {
      out.devices.push_back({type, compat::autocast_enabled(type), compat::autocast_dtype(type)});
    }
    return out;
  }

  // Makes this the state until the guard ends, nesting like an autocast scope (precision/autocast.h):
  // the cache of cast weights is cleared when the outermost scope ends.
  ScopeGuard enter() const {
    const AutocastState before = now();
    for (const auto& d : devices) {
      compat::set_autocast_enabled(d.type, d.enabled);
      compat::set_autocast_dtype(d.type, d.dtype);
    }
    at::autocast::increment_nesting();
    return ScopeGuard([before] {
      if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
      for (const auto& d : before.devices) {
        compat::set_autocast_enabled(d.type, d.enabled);
        compat::set_autocast_dtype(d.type, d.dtype);
      }
    });
  }
};

// What the backward needs besides the saved inputs: the function, what it ran under, and which
// of the node's tensors are inputs, parameters and buffers.
struct Recompute : torch::CustomClassHolder {
  CheckpointedFunction fn;
  std::vector<bool> input_requires_grad;
  std::vector<torch::Tensor> parameters;
  std::vector<torch::Tensor> buffers;
  bool preserve_rng_state = true;
  std::vector<torch::Device> devices;  // distinct; CPU first
  GeneratorStates rng;
  AutocastState autocast;
};

// Walks the recomputed graph from `outputs`, stopping at `allowed` (the detached inputs' and the
// parameters' nodes), and fails naming what to do when it leaves the recompute: at a leaf that
// requires a gradient (a tensor fn read that is neither an input nor a parameter would get no
// gradient), or at a node made before the recompute began (`first_node`, this thread's sequence
// number then: a tensor computed outside fn, whose graph the inner differentiation would run and
// free). Nodes made on another thread (the forward's, when the backward runs on a device's
// thread) are not told apart by number; their leaves still are.
void check_reaches_only(const variable_list& outputs, const std::unordered_set<const torch::autograd::Node*>& allowed,
                        uint64_t first_node) {
  std::vector<const torch::autograd::Node*> stack;
  std::unordered_set<const torch::autograd::Node*> seen;
  for (const auto& output : outputs) {
    if (output.defined() && output.grad_fn()) stack.push_back(output.grad_fn().get());
  }
  while (!stack.empty()) {
    const auto* node = stack.back();
    stack.pop_back();
    if (!seen.insert(node).second || allowed.count(node)) continue;
    const bool is_leaf = node->next_edges().empty() && node->name().find("AccumulateGrad") != std::string::npos;
    check<ConfigurationError>(
        !is_leaf, "volt::checkpoint: the function reads a tensor that requires a gradient but is neither one of its "
                  "inputs nor one of its parameters, so its gradient would be lost; pass it in `inputs` or "
                  "`parameters`");
    check<ConfigurationError>(
        node->sequence_nr() >= first_node,
        "volt::checkpoint: the function reads a tensor that was computed outside it and requires a gradient (an "
        "earlier layer's output, a view of a parameter made outside); pass it in `inputs`, or compute it inside");
    for (const auto& edge : node->next_edges()) {
      if (edge.function) stack.push_back(edge.function.get());
    }
  }
}

// Autocast's cache of cast weights off until the guard ends. A cast made without recording (the
// checkpointed forward) has no gradient history; cached, it would be reused by a later use of the
// weight in the same autocast scope (the recompute, when the backward runs inside the scope, or
// the weight's use outside the checkpoint), whose gradient would then be lost.
ScopeGuard without_autocast_cache() {
  const bool before = at::autocast::is_autocast_cache_enabled();
  at::autocast::set_autocast_cache_enabled(false);
  return ScopeGuard([before] { at::autocast::set_autocast_cache_enabled(before); });
}

// The autograd function: its forward runs fn without recording; its backward runs fn again with
// recording and differentiates it (Note [Recomputed forwards]).
struct CheckpointFunction : torch::autograd::Function<CheckpointFunction> {
  static variable_list forward(AutogradContext* ctx, c10::intrusive_ptr<Recompute> recompute,
                               torch::TensorList inputs, torch::TensorList /*parameters*/) {
    ctx->save_for_backward(std::vector<torch::Tensor>(inputs.begin(), inputs.end()));
    ctx->saved_data["recompute"] = c10::IValue::make_capsule(recompute);
    ScopeGuard no_cache = without_autocast_cache();
    return recompute->fn(std::vector<torch::Tensor>(inputs.begin(), inputs.end()));
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto recompute = c10::static_intrusive_pointer_cast<Recompute>(ctx->saved_data["recompute"].toCapsule());
    // Recording here means the outer backward builds a graph of its own (create_graph): so does ours.
    const bool create_graph = torch::GradMode::is_enabled();
    const variable_list saved = ctx->get_saved_variables();
    std::vector<torch::Tensor> detached;
    for (size_t i = 0; i < saved.size(); ++i) {
      detached.push_back(saved[i].detach().requires_grad_(recompute->input_requires_grad[i]));
    }
    // Put back once the recomputed graph is differentiated: it may have saved the buffers
    // (BatchNorm saves its running statistics), and writing them earlier would fail its version check.
    std::vector<torch::Tensor> buffers_before;
    for (const auto& buffer : recompute->buffers) buffers_before.push_back(buffer.clone());
    ScopeGuard put_back_buffers([&] {
      torch::NoGradGuard no_grad;
      for (size_t i = 0; i < buffers_before.size(); ++i) recompute->buffers[i].copy_(buffers_before[i]);
    });

    variable_list outputs;
    uint64_t first_node = 0;
    {
      const GeneratorStates current =
          recompute->preserve_rng_state ? GeneratorStates::of(recompute->devices) : GeneratorStates{};
      if (recompute->preserve_rng_state) recompute->rng.restore();
      ScopeGuard put_back_rng([&current] { current.restore(); });
      ScopeGuard autocast = recompute->autocast.enter();
      ScopeGuard no_cache = without_autocast_cache();
      torch::AutoGradMode recording(true);
      first_node = at::sequence_number::peek();
      outputs = recompute->fn(detached);
    }
    check<ConfigurationError>(outputs.size() == grad_outputs.size(), "volt::checkpoint: the function returned ",
                              outputs.size(), " tensors in the backward's recompute but ", grad_outputs.size(),
                              " in the forward; it must compute the same thing both times");

    // What to differentiate: outputs that carry a gradient; with respect to: the inputs and
    // parameters that require one.
    variable_list targets, target_grads, wrt;
    for (size_t i = 0; i < outputs.size(); ++i) {
      if (outputs[i].requires_grad() && grad_outputs[i].defined()) {
        targets.push_back(outputs[i]);
        target_grads.push_back(grad_outputs[i]);
      }
    }
    std::vector<int64_t> slot;  // wrt's index of each node input (-1: none)
    std::unordered_set<const torch::autograd::Node*> allowed;
    auto consider = [&](const torch::Tensor& t) {
      if (t.defined() && t.requires_grad()) {
        slot.push_back(static_cast<int64_t>(wrt.size()));
        wrt.push_back(t);
        if (auto accumulator = torch::autograd::impl::try_get_grad_accumulator(t)) allowed.insert(accumulator.get());
        if (t.grad_fn()) allowed.insert(t.grad_fn().get());
      } else {
        slot.push_back(-1);
      }
    };
    for (const auto& t : detached) consider(t);
    for (const auto& t : recompute->parameters) consider(t);
    check_reaches_only(targets, allowed, first_node);

    variable_list grads;
    if (!targets.empty() && !wrt.empty()) {
      grads = torch::autograd::grad(targets, wrt, target_grads, /*retain_graph=*/create_graph, create_graph,
                                    /*allow_unused=*/true);
    }
    // One gradient per forward argument: none for the Recompute, then inputs, then parameters.
    variable_list result{torch::Tensor()};
    for (const int64_t s : slot) result.push_back(s >= 0 && !grads.empty() ? grads[s] : torch::Tensor());
    return result;
  }
};

}  // namespace

std::vector<torch::Tensor> checkpoint(const CheckpointedFunction& fn, const std::vector<torch::Tensor>& inputs,
                                      const std::vector<torch::Tensor>& parameters,
                                      const std::vector<torch::Tensor>& buffers, CheckpointOptions options) {
  check<ConfigurationError>(static_cast<bool>(fn), "volt::checkpoint: no function given");
  for (size_t i = 0; i < inputs.size(); ++i) {
    check<ConfigurationError>(inputs[i].defined(), "volt::checkpoint: input ", i,
                              " is an undefined tensor; pass defined tensors only");
  }
  auto recompute = c10::make_intrusive<Recompute>();
  recompute->fn = fn;
  for (const auto& input : inputs) recompute->input_requires_grad.push_back(input.requires_grad());
  // Each parameter once: a module reached twice (shared) lists its parameters twice, and two
  // copies would each return the whole gradient to the one accumulator.
  std::unordered_set<const c10::TensorImpl*> listed;
  for (const auto& p : parameters) {
    if (listed.insert(p.unsafeGetTensorImpl()).second) recompute->parameters.push_back(p);
  }
  recompute->buffers = buffers;
  recompute->preserve_rng_state = options.preserve_rng_state;
  auto note_device = [&](const torch::Device& device) {
    auto& devices = recompute->devices;
    if (std::find(devices.begin(), devices.end(), device) == devices.end()) devices.push_back(device);
  };
  note_device(torch::kCPU);
  for (const auto& t : inputs) note_device(t.device());
  for (const auto& t : parameters) note_device(t.device());
  if (options.preserve_rng_state) recompute->rng = GeneratorStates::of(recompute->devices);
  recompute->autocast = AutocastState::now();
  return CheckpointFunction::apply(recompute, torch::TensorList(inputs), torch::TensorList(recompute->parameters));
}

}  // namespace volt
