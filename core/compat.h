#pragma once
// Every difference between LibTorch 1.13 (Debian, CPU) and 2.x (CUDA builds) that volt meets
// lives here, so the rest of the code reads the same for both.
#include <ATen/Context.h>
#include <ATen/core/Tensor.h>
#include <c10/util/C++17.h>
#include <ATen/autocast_mode.h>
#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/version.h>

#include <functional>
#include <string>

namespace volt::compat {

#if defined(VOLT_WITH_CUDA)
inline constexpr bool kBuiltWithCuda = true;
#else
inline constexpr bool kBuiltWithCuda = false;
#endif

inline constexpr bool kTorch2 = TORCH_VERSION_MAJOR >= 2;

// Whether c10d's Gloo backend reduces bfloat16 tensors itself (Note [bfloat16 over Gloo] in
// distributed/process_group_communicator.cpp): LibTorch 2.2 added it, each pairwise sum computed in
// float and rounded to bfloat16 as volt's inline path does; 1.13's throws "Invalid scalar type".
inline constexpr bool kGlooReducesBfloat16 =
    TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 2);

// Both versions take (enabled, warn_only); kept here because the signature moved before.
inline void set_deterministic_algorithms(bool enabled) {
  at::globalContext().setDeterministicAlgorithms(enabled, /*warn_only=*/false);
}

// The key under which torch::optim::Optimizer::state() keeps a parameter's state: the address of
// its TensorImpl, printed into a string in 1.13 and as a plain pointer in 2.x.
#if TORCH_VERSION_MAJOR >= 2
using OptimizerStateKey = void*;
inline OptimizerStateKey optimizer_state_key(const at::Tensor& parameter) {
  return parameter.unsafeGetTensorImpl();
}
#else
using OptimizerStateKey = std::string;
inline OptimizerStateKey optimizer_state_key(const at::Tensor& parameter) {
  return c10::guts::to_string(parameter.unsafeGetTensorImpl());
}
#endif

// Autocast state is thread-local and per device type. LibTorch before 2.4 has one function per
// device type (set_cpu_enabled, set_autocast_gpu_dtype, ...); 2.4 made the device type an
// argument and deprecated the old names.
#define VOLT_TORCH_DEVICE_AUTOCAST_API \
  (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4))

inline bool autocast_enabled(c10::DeviceType device_type) {
#if VOLT_TORCH_DEVICE_AUTOCAST_API
  return at::autocast::is_autocast_enabled(device_type);
#else
  return device_type == c10::DeviceType::CPU ? at::autocast::is_cpu_enabled() : at::autocast::is_enabled();
#endif
}

inline void set_autocast_enabled(c10::DeviceType device_type, bool enabled) {
#if VOLT_TORCH_DEVICE_AUTOCAST_API
  at::autocast::set_autocast_enabled(device_type, enabled);
#else
  if (device_type == c10::DeviceType::CPU) {
    at::autocast::set_cpu_enabled(enabled);
  } else {
    at::autocast::set_enabled(enabled);
  }
#endif
}

inline c10::ScalarType autocast_dtype(c10::DeviceType device_type) {
#if VOLT_TORCH_DEVICE_AUTOCAST_API
  return at::autocast::get_autocast_dtype(device_type);
#else
  return device_type == c10::DeviceType::CPU ? at::autocast::get_autocast_cpu_dtype()
                                             : at::autocast::get_autocast_gpu_dtype();
#endif
}

inline void set_autocast_dtype(c10::DeviceType device_type, c10::ScalarType dtype) {
#if VOLT_TORCH_DEVICE_AUTOCAST_API
  at::autocast::set_autocast_dtype(device_type, dtype);
#else
  if (device_type == c10::DeviceType::CPU) {
    at::autocast::set_autocast_cpu_dtype(dtype);
  } else {
    at::autocast::set_autocast_gpu_dtype(dtype);
  }
#endif
}

// A post hook on an autograd node (DDP hooks gradient accumulators) that calls `callback` after
// the node ran. FunctionPostHook's call operator takes (outputs, inputs) in both versions; 2.x
// adds a virtual compiled_args() for compiled autograd, which keeps its default here. Returns the
// key for Node::del_post_hook.
class CallbackPostHook : public torch::autograd::FunctionPostHook {
 public:
  explicit CallbackPostHook(std::function<void()> callback) : callback_(std::move(callback)) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list& /*inputs*/) override {
    callback_();
    return outputs;
  }

 private:
  std::function<void()> callback_;
};

inline uintptr_t add_post_hook(torch::autograd::Node& node, std::function<void()> callback) {
  return node.add_post_hook(std::make_unique<CallbackPostHook>(std::move(callback)));
}

}  // namespace volt::compat
