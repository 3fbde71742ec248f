#include "distributed/transports/c10d_process_group.h"

#include "distributed/padded_bytes.h"

namespace volt {

// Note [NCCL and this rank's device]
// Every process of a node must drive its own GPU (cuda:<local rank>, run/device_choice.h).
// An NCCL communicator lives on the device that is current when it is created, and c10d's NCCL
// group creates it lazily, at the first collective, on the device of that collective's tensors;
// a barrier has no tensor, so c10d guesses a device (rank % visible devices in 1.13), which is
// the wrong GPU on a multi-node run with other device counts and creates a second communicator.
// So: the Trainer makes the rank's device current before the group exists (make_current_device),
// the group is bound to it where LibTorch can (compat::bind_to_device, 2.3+), and every barrier
// names it (BarrierOptions::device_ids, 1.13 and 2.x). Tensors handed to NCCL collectives must be
// on that device; a CUDA tensor elsewhere is refused by check_tensor, and so is a CPU tensor,
// which only the blocking collectives stage there (Note [CPU tensors on a device's backend]).

c10::intrusive_ptr<compat::C10dBackend> make_process_group(const std::string& backend,
                                                           const c10::intrusive_ptr<c10d::Store>& store,
                                                           int64_t rank, int64_t size,
                                                           const std::shared_ptr<gloo::transport::Device>& device,
                                                           std::chrono::milliseconds timeout,
                                                           const torch::Device& compute_device) {
#if defined(VOLT_WITH_CUDA)
  if (backend == "nccl") {
    auto options = c10d::ProcessGroupNCCL::Options::create();
    options->timeout = timeout;
    auto group = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, static_cast<int>(rank), static_cast<int>(size),
                                                             options);
    compat::bind_to_device(*group, compute_device);
    return group;
  }
#endif
  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  options->devices.push_back(device);
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, static_cast<int>(rank), static_cast<int>(size),
                                                     options);
}

void wait_until_connected(compat::C10dBackend& group, C10dEntry& entry, std::chrono::milliseconds timeout) {
  c10d::BarrierOptions barrier;
  barrier.timeout = timeout;
  entry.enter([&] { return group.barrier(barrier); })->wait(timeout);
}

c10d::ReduceOp to_c10d(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Mean: return c10d::ReduceOp::SUM;
    case ReduceOp::Max: return c10d::ReduceOp::MAX;
    case ReduceOp::Min: return c10d::ReduceOp::MIN;
  }
  return c10d::ReduceOp::SUM;
}

std::vector<std::string> all_gather_bytes_unnumbered(compat::C10dBackend& group, C10dEntry& entry, int64_t size,
                                                     std::chrono::milliseconds timeout, const std::string& bytes) {
  c10d::AllgatherOptions options;
  options.timeout = timeout;
  // `input` from every rank into the rows of `rows`.
  const auto gather_into = [&](const torch::Tensor& rows, const torch::Tensor& input) {
    std::vector<std::vector<at::Tensor>> outputs(1);
    for (int64_t r = 0; r < size; ++r) outputs[0].push_back(rows[r]);
    std::vector<at::Tensor> inputs{input};
    entry.enter([&] { return group.allgather(outputs, inputs, options); })->wait(timeout);
  };
  // Gloo moves equal sizes: first the lengths, then the bytes padded to the longest.
  const auto lengths = torch::empty({size}, torch::kLong);
  gather_into(lengths.view({size, 1}), torch::tensor({static_cast<int64_t>(bytes.size())}, torch::kLong));
  const int64_t longest = std::max<int64_t>(1, lengths.max().item<int64_t>());
  const auto rows = torch::empty({size, longest}, torch::kByte);
  gather_into(rows, padded_bytes(bytes, longest));
  return unpad_rows(rows, lengths);
}

}  // namespace volt
