#pragma once
// Note [Device tensors on Gloo] Gloo moves host memory. A run that computes on a CUDA device but
// asks for the gloo backend (--process-group-backend gloo: two processes sharing one GPU, which
// NCCL refuses, or a machine whose NCCL does not work) hands the communicator gradient buckets,
// flat shards and activations that live on the device. The communicator built for it wraps the
// Gloo one: each collective of a device tensor copies it to host memory, runs there (through
// shared memory when the ranks share the host, like any CPU collective), and its handle copies
// the result back into the device tensor when waited on. Host tensors pass through untouched.
// The copy to the host waits for the device, so a step on this backend synchronizes the host
// with the device at every collective, where NCCL's waits stay on the stream (Note [Waiting for
// NCCL without blocking the host]); it is the backend for running at all, not for speed.
// Private to distributed/ (Communicator::connect builds it).
#include <memory>

#include "distributed/communicator.h"

namespace volt {

// `gloo` (a communicator on the gloo backend) as seen by a rank computing on `device` (a CUDA
// device): collectives of tensors on `device` are staged through host memory. Sub-groups are
// staged alike.
std::shared_ptr<Communicator> stage_device_tensors_through_host(std::shared_ptr<Communicator> gloo,
                                                                torch::Device device);

}  // namespace volt
