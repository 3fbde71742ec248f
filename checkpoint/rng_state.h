#pragma once
// The states of this process's default random generators, under Lightning's names:
//   {"torch": uint8 tensor (what torch.get_rng_state() returns),
//    "torch.cuda": [uint8 tensor per CUDA device]  (only when CUDA is available)}
#include <c10/core/Device.h>

#include "core/state_dict.h"

namespace volt {

StateDict rng_state_dict();

// Restores the generators. A CUDA state is applied to as many devices as both the checkpoint and
// this process have; CUDA states without CUDA here are ignored (the CPU state still applies).
// "torch.cuda.device" (a rank's own device's state, from a multi-rank checkpoint) goes to
// `device` when that is a CUDA device. Throws CheckpointError when a state is not a generator
// state of this build.
void load_rng_state_dict(const StateDict& state, const torch::Device& device = torch::kCPU);

}  // namespace volt
