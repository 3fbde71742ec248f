// Note [Device tensors on Gloo]: a Communicator in front of a Gloo one that stages tensors on this
// rank's CUDA device through host memory.
#include "distributed/host_staged_communicator.h"

#include "core/error.h"
#include "distributed/staged_collective.h"

namespace volt {

namespace {

class HostStagedCommunicator : public Communicator {
 public:
  HostStagedCommunicator(std::shared_ptr<Communicator> gloo, torch::Device device)
      : Communicator(gloo->rank(), gloo->size(), gloo->global_ranks(), gloo->timeout()),
        gloo_(std::move(gloo)),
        device_(device) {}

  std::string backend_name() const override { return gloo_->backend_name(); }
  torch::Device tensor_device() const override { return gloo_->tensor_device(); }
  std::string bf16_reduction() const override { return gloo_->bf16_reduction(); }
  bool reduces_through_shared_memory() const override { return gloo_->reduces_through_shared_memory(); }
  bool runs_on_a_ring_thread() const override { return gloo_->runs_on_a_ring_thread(); }
  CollectiveCounters counters() const override { return gloo_->counters(); }
  void reset_counters() override { gloo_->reset_counters(); }
  void report_failure(const std::string& message) override { gloo_->report_failure(message); }

  std::vector<torch::Tensor> allocate_buffers(const std::vector<int64_t>& numels,
                                              const std::vector<c10::ScalarType>& dtypes) override {
    return gloo_->allocate_buffers(numels, dtypes);
  }

  std::shared_ptr<Communicator> new_group(std::vector<int64_t> ranks) override {
    auto group = gloo_->new_group(std::move(ranks));
    return group ? std::make_shared<HostStagedCommunicator>(std::move(group), device_) : nullptr;
  }

  // ---- collectives that change their argument in place: run on a host copy, copied back at wait().
  CollectiveHandle all_reduce_async(torch::Tensor tensor, ReduceOp op) override {
    return in_place(tensor, true, [&](const torch::Tensor& t) { return gloo_->all_reduce_async(t, op); });
  }
  CollectiveHandle broadcast_async(torch::Tensor tensor, int64_t root) override {
    return in_place(tensor, true, [&](const torch::Tensor& t) { return gloo_->broadcast_async(t, root); });
  }
  CollectiveHandle reduce_async(torch::Tensor tensor, int64_t root, ReduceOp op) override {
    return in_place(tensor, true, [&](const torch::Tensor& t) { return gloo_->reduce_async(t, root, op); });
  }
  CollectiveHandle recv_async(torch::Tensor tensor, int64_t peer) override {
    return in_place(tensor, false, [&](const torch::Tensor& t) { return gloo_->recv_async(t, peer); });
  }
  CollectiveHandle all_gather_chunks_async(torch::Tensor flat, std::vector<int64_t> counts) override {
    return in_place(flat, true,
                    [&](const torch::Tensor& t) { return gloo_->all_gather_chunks_async(t, std::move(counts)); });
  }
  CollectiveHandle all_gather_into_async(torch::Tensor output, const torch::Tensor& input) override {
    const auto source = on_host(input);
    return in_place(output, false, [&](const torch::Tensor& t) { return gloo_->all_gather_into_async(t, source); });
  }
  CollectiveHandle reduce_scatter_into_async(torch::Tensor output, const torch::Tensor& input, ReduceOp op) override {
    const auto source = on_host(input);
    return in_place(output, false,
                    [&](const torch::Tensor& t) { return gloo_->reduce_scatter_into_async(t, source, op); });
  }
  CollectiveHandle reduce_scatter_chunks_async(torch::Tensor output, const torch::Tensor& input,
                                               std::vector<int64_t> counts, ReduceOp op) override {
    const auto source = on_host(input);
    return in_place(output, false, [&](const torch::Tensor& t) {
      return gloo_->reduce_scatter_chunks_async(t, source, std::move(counts), op);
    });
  }

  // ---- collectives that return a new tensor: returned on the input's device.
  CollectiveHandle all_gather_async(const torch::Tensor& tensor) override {
    return staging::returned_on(tensor, staged(tensor), gloo_->all_gather_async(on_host(tensor)));
  }
  CollectiveHandle reduce_scatter_async(const torch::Tensor& input, ReduceOp op) override {
    return staging::returned_on(input, staged(input), gloo_->reduce_scatter_async(on_host(input), op));
  }
  CollectiveHandle gather_async(const torch::Tensor& tensor, int64_t root) override {
    return staging::returned_on(tensor, staged(tensor), gloo_->gather_async(on_host(tensor), root));
  }

  CollectiveHandle send_async(const torch::Tensor& tensor, int64_t peer) override {
    return gloo_->send_async(on_host(tensor), peer);
  }
  CollectiveHandle barrier_async() override { return gloo_->barrier_async(); }

 private:
  bool staged(const torch::Tensor& tensor) const { return tensor.defined() && tensor.device() == device_; }
  std::optional<torch::Device> host_for(const torch::Tensor& tensor) const {
    return staged(tensor) ? std::optional<torch::Device>(torch::kCPU) : std::nullopt;
  }

  // A host copy of a tensor on the device; any other tensor as it is, for the Gloo communicator
  // to accept or refuse.
  torch::Tensor on_host(const torch::Tensor& tensor) const { return staging::on(tensor, host_for(tensor)); }

  // Runs `collective` on a host copy of a tensor on the device, copied back when the handle is
  // waited on (staging::in_place).
  template <typename Collective>
  CollectiveHandle in_place(const torch::Tensor& tensor, bool read, Collective&& collective) {
    return staging::in_place(tensor, host_for(tensor), read, std::forward<Collective>(collective));
  }

  std::shared_ptr<Communicator> gloo_;
  torch::Device device_;
};

}  // namespace

std::shared_ptr<Communicator> stage_device_tensors_through_host(std::shared_ptr<Communicator> gloo,
                                                                torch::Device device) {
  VOLT_INTERNAL_ASSERT(gloo && gloo->backend_name() == "gloo" && device.is_cuda(),
                       "host staging wraps a gloo communicator for a CUDA device");
  return std::make_shared<HostStagedCommunicator>(std::move(gloo), device);
}

}  // namespace volt
