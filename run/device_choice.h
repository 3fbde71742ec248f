#pragma once
// Which device a process of the run computes on. One rule, Lightning's and torchrun's: on CUDA,
// one device per local rank, so local rank r computes on cuda:r and the N processes of a node
// (--devices N) use its first N visible devices (CUDA_VISIBLE_DEVICES picks which ones those
// are). Otherwise the CPU. The Trainer asks choose_device() once, at construction, and hands the
// answer to its precision and strategy (StrategyEnvironment::device), which the process group binds to.
#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "distributed/process_topology.h"

namespace volt {

// The device of the process at `topology` for --accelerator `accelerator` ("cpu", "cuda", or
// "auto": cuda when a CUDA device is visible, else cpu), given how many CUDA devices this
// process sees (`visible_cuda_devices`, torch::cuda::device_count()). A pure function: no CUDA
// call, so that it is tested without a GPU.
// Throws NotSupportedError for cuda when no CUDA device is visible, and ConfigurationError when
// the node runs more processes than it has visible devices (every local rank fails alike, not
// only the ones without a device, so no rank waits for the others at the rendezvous) or for an
// unknown accelerator; each message names this process's device and what to do.
torch::Device choose_device(const std::string& accelerator, const ProcessTopology& topology,
                            int64_t visible_cuda_devices);
// The same for a process that drives `devices_per_process` devices (a strategy that replicates
// the model inside its process, Placement::devices_per_process): local rank r computes on
// cuda:r·k to cuda:r·k+k-1, the first being its root device; on the CPU, k times the CPU.
// `share_devices` (the gloo backend on CUDA, which NCCL's one-rank-per-device rule does not bind):
// a node may run more processes than it has devices; they wrap around, local rank r computing on
// cuda:(r·k mod visible) onwards, so that `--devices 2` runs on a machine with one GPU.
std::vector<torch::Device> choose_devices(const std::string& accelerator, const ProcessTopology& topology,
                                          int64_t visible_cuda_devices, int64_t devices_per_process,
                                          bool share_devices = false);

// Makes `device` the calling thread's current CUDA device (c10::cuda::set_device), so that
// whatever allocates on "the current device" (NCCL's communicators and streams, CUDA's caching
// allocator, a user's torch::kCUDA without an index) lands on this process's GPU instead of
// cuda:0. Nothing for a CPU device.
void make_current_device(const torch::Device& device);

}  // namespace volt
