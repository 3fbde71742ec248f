#pragma once
// The c10d differences between LibTorch 1.13 (Debian, CPU) and 2.x (CUDA builds). Private to
// distributed/ — the only code that includes c10d — so that no other translation unit
// pays for c10d's headers; core/compat.h holds every other version difference.
//
// 1.13: ProcessGroupGloo / ProcessGroupNCCL derive from c10d::ProcessGroup.
// 2.x:  they derive from c10d::Backend (ProcessGroup became a dispatcher over backends).
// Both expose the same collective methods (allreduce, broadcast, ...) with the same options.
#include <torch/version.h>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#if defined(VOLT_WITH_CUDA)
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

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
