#pragma once
// The c10d differences between LibTorch 1.13 (Debian, CPU) and 2.x (CUDA builds). Private to
// distributed/ — the only code that includes c10d — so that no other translation unit
// pays for c10d's headers; core/compat.h holds every other version difference.
//
// 1.13: ProcessGroupGloo / ProcessGroupNCCL derive from c10d::ProcessGroup.
// 2.x:  they derive from c10d::Backend (ProcessGroup became a dispatcher over backends).
// Both expose the same collective methods (allreduce, broadcast, ...) with the same options.
#include <torch/version.h>

#include "core/compat.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#if defined(VOLT_WITH_CUDA)
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

// Note [Gloo headers for a LibTorch with its own Gloo]
// ProcessGroupGloo.hpp includes <gloo/...>. Debian's LibTorch links the shared libgloo whose
// headers libgloo-dev installs. PyTorch's wheels link a newer Gloo into libtorch_cpu.so and ship
// no Gloo headers, so volt compiles this header against libgloo-dev's (2022) there too. That is
// sound because volt holds Gloo objects only through shared_ptr (the transport device, which
// ProcessGroupGloo::createDeviceFor* makes inside LibTorch) and never constructs one, and
// ProcessGroupGloo's own members hold no Gloo type by value: nothing volt compiles depends on the
// layout of the Gloo inside LibTorch. The newer store interface (GLOO_STORE_HAS_STORE_V2) is
// guarded out by the header itself. What would depend on it, volt calling Gloo's algorithms
// directly (Note [Inline all_reduce]), is compiled out for such a LibTorch
// (cmake/torch_features.cmake), and libgloo.so is then never linked: one Gloo per process.

#ifndef USE_C10D_GLOO
#error "volt's communicator needs USE_C10D_GLOO (cmake/torch_features.cmake defines it)"
#endif

namespace volt::compat {

#if TORCH_VERSION_MAJOR >= 2
using C10dBackend = c10d::Backend;
#else
using C10dBackend = c10d::ProcessGroup;
#endif

// Binds a process group to `device` (a CUDA device with an index) where LibTorch can: 2.3 added
// Backend::setBoundDeviceId (what torch.distributed.init_process_group(device_id=...) sets),
// which ProcessGroupNCCL uses for barriers and communicator splits instead of guessing a device
// from the rank. Before 2.3 there is none; volt's barriers name the device themselves (Note
// [NCCL and this rank's device]).
inline void bind_to_device(C10dBackend& group, const at::Device& device) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
  group.setBoundDeviceId(device);
#else
  (void)group;
  (void)device;
#endif
}

}  // namespace volt::compat
