#pragma once
// Note [Snapshots of device memory] A checkpoint written in the background is first copied to
// host memory (Note [Checkpoints written in the background]). The host tensors are kept and
// refilled by the next snapshot of the same shapes, so a large state is copied, not allocated and
// page-faulted in afresh at every save. A tensor on a CUDA device is copied into page-locked
// (pinned) host memory on a copy stream of its own, asynchronously: the training thread only
// enqueues the copies and goes on. The compute stream is made to wait for them on the device
// (an event, no host synchronization), so that no later kernel (the next step's forward writing a
// buffer, its optimizer step writing the parameters and their state) can change a tensor before
// its copy has read it; each source is marked as used on the copy stream, so that the caching
// allocator reuses none of them before their copy is done. The writer thread waits for the
// copies (wait_until_copied) before it serializes. The cost left on the device is the copy's
// time at the host link's bandwidth, during which the next step's kernels wait; the host never
// waits. On the CPU, or in a build without CUDA, a snapshot is a plain copy.
#include <torch/torch.h>

#include <memory>
#include <vector>

namespace volt {

class HostSnapshot {
 public:
  HostSnapshot();
  ~HostSnapshot();
  HostSnapshot(const HostSnapshot&) = delete;
  HostSnapshot& operator=(const HostSnapshot&) = delete;

  // `value` with every tensor copied to host memory (into the previous snapshot's host tensors
  // where the shapes and dtypes match) and every container rebuilt: a snapshot that the training
  // thread may go on changing the originals of. Copies from CUDA devices may still be in flight
  // when it returns. Must not be called while a writer may still read the previous snapshot.
  c10::IValue take(const c10::IValue& value);
  // Blocks until every copy of the last take() is in host memory. Thread-safe against nothing
  // else; the writer thread calls it once, before it reads the snapshot.
  void wait_until_copied();

  // Host bytes held between saves (the kept host tensors), pinned ones among them.
  int64_t held_bytes() const;
  int64_t pinned_bytes() const;

 private:
  struct Copies;  // the copy stream's events of the last take() (CUDA builds)
  torch::Tensor copy(const torch::Tensor& tensor);
  c10::IValue copy_all(const c10::IValue& value);

  std::vector<torch::Tensor> staging_;  // the host tensors, by their place in the snapshot
  size_t next_ = 0;                     // the place of the next tensor during take()
  std::unique_ptr<Copies> copies_;
};

}  // namespace volt
