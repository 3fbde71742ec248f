#pragma once
// One recorded sequence of device work that later runs again by a single launch: what a captured
// step (--cuda-graph, docs/training_loop.md#captured-steps) is made of.
//
// Note [What a captured graph holds]: capture records the kernels a piece of host code issues on
// the device, with the addresses of every tensor they read and write; capture itself runs none
// of them. A replay launches the recorded kernels again on the same addresses, and nothing of the
// host code: no C++ runs, no tensor is allocated, no decision is taken again. So what changes
// between replays must live in the tensors the graph reads (a batch copied into its static input
// buffers, a learning rate or a step count in a device tensor), and host code inside the
// captured region (a hook, a counter, a log call) runs once, at capture. A value read on the
// host inside the region (Tensor::item(), a copy to the CPU) cannot be recorded: the capture
// fails. Each graph has its own memory pool, which its kernels' temporaries and outputs live in
// for as long as the graph does.
#include <torch/torch.h>

#include <functional>
#include <memory>

namespace volt {

class CapturedGraph {
 public:
  virtual ~CapturedGraph() = default;
  // Records what `body` issues on the device, without running it. Throws NotSupportedError,
  // naming what the device reported, when `body` did something a graph cannot hold; the graph
  // is then empty and the device as it was before the call.
  virtual void capture(const std::function<void()>& body) = 0;
  // Runs the recorded work once more, on the current stream. Throws StateError before capture().
  virtual void replay() = 0;
};

// Whether this build of volt can capture CUDA graphs (LibTorch with CUDA).
bool cuda_graphs_compiled();

// A CUDA graph on `device`. Capture runs on a side stream that first waits for the current one
// (which then waits for it); the default CUDA generator of `device` is registered with the graph,
// so that dropout draws new numbers at every replay. Throws NotSupportedError for a device that
// is not CUDA, or in a build without CUDA.
std::unique_ptr<CapturedGraph> make_cuda_graph(const torch::Device& device);

// Whether the calling thread is recording a graph on `device` now (code that must not read a
// value on the host, or must leave a device tensor for the replays to change, asks this).
bool capturing_on(const torch::Device& device);

}  // namespace volt
