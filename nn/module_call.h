#pragma once
// Note [Calling a module through volt]: PyTorch runs a module's forward hooks because every call
// goes through Module.__call__; LibTorch's C++ modules have no such call: `block->forward(x,
// mask)` is a plain member call that nothing can intercept. volt::call is that missing __call__:
//
//   for (auto& block : blocks_) x = volt::call(block, x, mask);   // instead of block->forward(x, mask)
//
// It runs the module's forward inside the wrappers registered for that module object (FSDP's unit,
// which gathers around it; activation checkpointing, which recomputes it), and is the plain
// forward call when none is registered (one lookup in a process-wide table, without a lock while
// no module anywhere has a wrapper). A Sequential needs nothing: a policy that selects one of its
// entries replaces the entry by one that calls through (route_sequential_entry).
//
// The call's torch::Tensor arguments are the wrapped forward's inputs: a wrapper may run the
// forward again with other tensors in their place (activation checkpointing recomputes with
// detached copies), so the call keeps copies of the other arguments and of the module handle
// until the backward. A wrapped forward must return one torch::Tensor; a module whose forward
// returns anything else can be called through volt::call only while nothing wraps it (a policy
// that selects it fails at its first call, naming it).
#include <torch/torch.h>

#include <array>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace volt {

// The module's forward with `tensors` in place of the call's tensor arguments.
using ModuleForward = std::function<torch::Tensor(const std::vector<torch::Tensor>& tensors)>;

// What runs around a module's forward when it is called through volt::call.
class ForwardWrapper {
 public:
  virtual ~ForwardWrapper() = default;
  // Wrappers of a smaller depth run outside those of a larger one, whatever order they were
  // registered in: FSDP's unit (kUnitDepth) gathers around the checkpointed forward.
  virtual int depth() const = 0;
  // Runs `forward` (with `tensors`, the call's tensor arguments, or others in their place) and
  // returns its output. `tensors_complete`: false when an argument of another type (an optional
  // or a container of tensors, a struct) may carry a tensor that `tensors` does not hold.
  virtual torch::Tensor around(torch::nn::Module& module, const std::vector<torch::Tensor>& tensors,
                               const ModuleForward& forward, bool tensors_complete) = 0;
};

constexpr int kUnitDepth = 0;           // FSDP's units
constexpr int kCheckpointingDepth = 1;  // activation checkpointing

// Registers `wrapper` around `module`'s calls until it is removed; the caller keeps the module
// alive meanwhile (strategies remove theirs at teardown). Thread-safe.
void add_forward_wrapper(torch::nn::Module& module, std::shared_ptr<ForwardWrapper> wrapper);
void remove_forward_wrapper(torch::nn::Module& module, const ForwardWrapper& wrapper);
bool has_forward_wrappers(const torch::nn::Module& module);

// `forward` inside `module`'s wrappers, outermost first (`tensors_complete` as ForwardWrapper says).
torch::Tensor run_wrapped_forward(torch::nn::Module& module, const std::vector<torch::Tensor>& tensors,
                                  const ModuleForward& forward, bool tensors_complete = true);

// `module`'s type as a policy names it: the class name without a trailing "Impl" ("Block" for
// BlockImpl, "torch::nn::Linear" for torch::nn::LinearImpl).
std::string module_type_name(const torch::nn::Module& module);
// `name` without a trailing "Impl" (a name that is only "Impl" stays).
std::string without_impl_suffix(std::string name);

namespace detail {

template <typename T>
constexpr bool is_tensor_v = std::is_same_v<std::decay_t<T>, torch::Tensor>;

// An argument that cannot carry a tensor besides being one: a tensor, a number, an enumeration.
template <typename T>
constexpr bool is_plain_argument_v =
    is_tensor_v<T> || std::is_arithmetic_v<std::decay_t<T>> || std::is_enum_v<std::decay_t<T>>;

// For each argument, its index among the call's tensor arguments.
template <typename... Args>
constexpr std::array<size_t, sizeof...(Args)> tensor_slots() {
  constexpr std::array<bool, sizeof...(Args)> is_tensor{is_tensor_v<Args>...};
  std::array<size_t, sizeof...(Args)> slots{};
  size_t count = 0;
  for (size_t i = 0; i < sizeof...(Args); ++i) {
    slots[i] = count;
    if (is_tensor[i]) ++count;
  }
  return slots;
}

template <typename Arg, typename Saved>
const auto& argument_or_tensor(const Saved& saved, const std::vector<torch::Tensor>& tensors, size_t slot) {
  if constexpr (is_tensor_v<Arg>) {
    return tensors[slot];
  } else {
    return saved;
  }
}

// What a call keeps of an argument for a later run: a copy, but nothing of a tensor argument
// (given again each run; keeping it would keep its graph alive as long as the recompute).
template <typename Arg>
auto kept_argument(const Arg& arg) {
  if constexpr (is_tensor_v<Arg>) {
    return torch::Tensor();
  } else {
    return std::decay_t<Arg>(arg);
  }
}

[[noreturn]] void throw_not_a_tensor_forward(const torch::nn::Module& module, const char* result_type);

}  // namespace detail

// module->forward(args...) inside the wrappers registered for the module (Note [Calling a module
// through volt]). `module`: a ModuleHolder (Block), a shared_ptr or a pointer to the module
// (`block->as<Block>()`); a forward that returns a reference returns a copy here.
template <typename Holder, typename... Args>
auto call(Holder&& module, Args&&... args) -> std::decay_t<decltype(module->forward(std::forward<Args>(args)...))> {
  using Result = decltype(module->forward(std::forward<Args>(args)...));
  torch::nn::Module& target = *module;
  if (!has_forward_wrappers(target)) return module->forward(std::forward<Args>(args)...);
  if constexpr (!std::is_same_v<std::decay_t<Result>, torch::Tensor>) {
    detail::throw_not_a_tensor_forward(target, typeid(Result).name());
  } else {
    std::vector<torch::Tensor> tensors;
    (
        [&](const auto& arg) {
          if constexpr (detail::is_tensor_v<decltype(arg)>) tensors.push_back(arg);
        }(args),
        ...);
    // Copies, not references: a wrapper may run it in the backward, after this call returned.
    ModuleForward forward = [module = std::decay_t<Holder>(module), ... saved = detail::kept_argument(args)](
                                const std::vector<torch::Tensor>& given) mutable {
      constexpr auto slots = detail::tensor_slots<Args...>();
      auto kept = std::tie(saved...);
      return [&]<size_t... I>(std::index_sequence<I...>) {
        return module->forward(detail::argument_or_tensor<Args>(std::get<I>(kept), given, slots[I])...);
      }(std::index_sequence_for<Args...>{});
    };
    return run_wrapped_forward(target, tensors, forward, (detail::is_plain_argument_v<Args> && ...));
  }
}

// An entry of a Sequential's forward replaced by another module (the Sequential's registered
// children stay as they are), and what puts it back.
struct RoutedEntry {
  torch::nn::SequentialImpl* sequential;
  size_t index;
  torch::nn::AnyModule original;
};
RoutedEntry replace_sequential_entry(torch::nn::SequentialImpl& sequential, size_t index,
                                     torch::nn::AnyModule replacement);
void restore_sequential_entry(const RoutedEntry& routed);
// Replaces entry `index` of `sequential` (the module `entry_module`, registered there) by one
// that calls it through its wrappers. An entry that calls through already is left as it is
// (nullopt).
std::optional<RoutedEntry> route_sequential_entry(torch::nn::SequentialImpl& sequential, size_t index,
                                                  torch::nn::Module& entry_module);

}  // namespace volt
