#include "checkpoint/rng_state.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <torch/torch.h>

#include <mutex>

#include "core/error.h"

namespace volt {
namespace {

torch::Tensor state_of(at::Generator generator) {
  std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get_state();
}

void set_state(at::Generator generator, const torch::Tensor& state, const std::string& what) {
  std::lock_guard<std::mutex> lock(generator.mutex());
  try {
    // A tensor of its own, at offset 0: a state that is a view into a larger storage (a row of
    // gather_from_ranks' matrix, as a resumed checkpoint holds it) crashes LibTorch 2.11's
    // CPUGeneratorImpl::set_state (torch.set_rng_state(rows[1]) segfaults in Python as well).
    generator.set_state(state.to(torch::kCPU).clone(at::MemoryFormat::Contiguous));
  } catch (const c10::Error& error) {
    throw CheckpointError("checkpoint: cannot restore the " + what + " random state: " +
                          error.what_without_backtrace() + "; the checkpoint is damaged or from another build");
  }
}

int64_t cuda_devices() { return torch::cuda::is_available() ? static_cast<int64_t>(torch::cuda::device_count()) : 0; }

}  // namespace

StateDict rng_state_dict() {
  StateDict state;
  state.set("torch", state_of(at::detail::getDefaultCPUGenerator()));
  if (const int64_t n = cuda_devices(); n > 0) {
    c10::impl::GenericList cuda(c10::AnyType::get());
    for (int64_t i = 0; i < n; ++i) {
      cuda.push_back(state_of(at::globalContext().defaultGenerator(torch::Device(torch::kCUDA, i))));
    }
    state.set("torch.cuda", cuda);
  }
  return state;
}

void load_rng_state_dict(const StateDict& state, const torch::Device& device) {
  set_state(at::detail::getDefaultCPUGenerator(), state.get_tensor("torch"), "CPU");
  if (state.contains("torch.cuda.device") && device.is_cuda() && cuda_devices() > 0) {
    set_state(at::globalContext().defaultGenerator(device), state.get_tensor("torch.cuda.device"), "CUDA device");
    return;
  }
  if (!state.contains("torch.cuda")) return;
  const auto cuda = state.at("torch.cuda");
  check<CheckpointError>(cuda.isList(), "checkpoint: rng_states['torch.cuda'] is not a list");
  const auto& saved = cuda.toListRef();
  const int64_t n = std::min<int64_t>(cuda_devices(), static_cast<int64_t>(saved.size()));
  for (int64_t i = 0; i < n; ++i) {
    check<CheckpointError>(saved[i].isTensor(), "checkpoint: rng_states['torch.cuda'][", i, "] is not a tensor");
    set_state(at::globalContext().defaultGenerator(torch::Device(torch::kCUDA, i)), saved[i].toTensor(),
              "CUDA device " + std::to_string(i));
  }
}

}  // namespace volt
