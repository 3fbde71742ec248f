// The c10d half of Communicator: a Gloo (or NCCL) process group, and the collectives on it with
// volt's timeouts, counters and error messages (the rendezvous: communicator_connect.cpp).
#include "distributed/process_group_communicator.h"

#include "core/collective_site.h"
#include "core/error.h"
#include "core/warning.h"
#include "distributed/collective_arguments.h"
#include "distributed/collective_handle_state.h"
#include "distributed/transports/c10d_entry.h"
#include "distributed/transports/c10d_process_group.h"
#include "distributed/transports/padded_chunks.h"
#include "distributed/transports/ring_all_gather.h"
#include "distributed/transports/ring_chunks.h"
#include "distributed/transports/ring_reduce_scatter.h"
#include "distributed/transports/transports.h"

namespace volt {

// ---------------------------------------------------------------------------------------------
// ProcessGroupCommunicator

namespace {

// What a collective's description says of one that goes through shared memory.
constexpr const char* kThroughShm = " through shared memory";

// The c10d tag of every send and receive (Note [Point to point]).
constexpr int kPointToPointTag = 0;

// A collective's finisher for `tensor`, which ran on `work` (itself, or a contiguous copy): the
// result copied back into `tensor` where they differ.
std::function<torch::Tensor()> copied_back(torch::Tensor tensor, torch::Tensor work) {
  return [tensor, work]() mutable {
    if (!work.is_same(tensor)) tensor.copy_(work);
    return tensor;
  };
}

int64_t payload_bytes(const torch::Tensor& t) {
  return t.defined() ? t.numel() * static_cast<int64_t>(t.element_size()) : 0;
}

class ProcessGroupCommunicator : public Communicator {
 public:
  // `store` is this communicator's own key space; the process group and every sub-group get a
  // prefix inside it.
  ProcessGroupCommunicator(int64_t rank, int64_t size, std::vector<int64_t> global_ranks, ProcessGroupSetup setup,
                           bool is_root)
      : Communicator(rank, size, std::move(global_ranks), setup.timeout),
        setup_(std::move(setup)),
        arguments_(describe(), this->size(), setup_.backend == "nccl", setup_.compute_device),
        is_root_(is_root) {
    try {
      process_group_ = make_process_group(setup_.backend, c10::make_intrusive<c10d::PrefixStore>("pg", setup_.store),
                                          rank, size, setup_.device, timeout(), setup_.compute_device);
      transports_ = std::make_unique<Transports>(setup_, rank, size, timeout());
      // Joining a rendezvous: nobody returns before everyone has connected.
      if (setup_.backend == "gloo" && size > 1) wait_until_connected(*process_group_, entry_, timeout());
      transports_->join_host_memory(setup_, shared_memory_exchange(), rank, size, timeout(), describe());
    } catch (const std::exception& e) {
      throw DistributedError(describe() + ": could not connect to the other " + std::to_string(size - 1) +
                             " rank(s) within the timeout of " + std::to_string(timeout().count()) +
                             " ms: " + cause_of(e) +
                             ". Check that every rank was started, with the same world size, and that "
                             "the ranks can reach each other (GLOO_SOCKET_IFNAME)");
    }
  }

  ~ProcessGroupCommunicator() override {
    // Note [Diagnosing a hang]: after a hang was found, this rank's work in Gloo stays blocked on
    // peers that will never come, and c10d's destructor (and the ring thread's) would wait for it
    // until the timeout. What is blocked is left to the end of the process.
    if (setup_.monitor && !setup_.monitor->hang_verdict().empty()) {
      [[maybe_unused]] auto* left_process_group = process_group_.release();
      [[maybe_unused]] auto* left_transports = transports_.release();
    }
  }

  std::string backend_name() const override { return setup_.backend; }

  torch::Device tensor_device() const override {
    return setup_.backend == "nccl" ? setup_.compute_device : torch::Device(torch::kCPU);
  }

  std::string bf16_reduction() const override {
    return setup_.backend != "gloo" || transports_->has_inline_all_reduce() || transports_->has_shared_memory() ||
                   compat::kGlooReducesBfloat16
               ? "native"
               : "float32";
  }

  bool reduces_through_shared_memory() const override { return transports_->reduces_through_shared_memory(); }
  bool runs_on_a_ring_thread() const override { return transports_->rings() != nullptr; }

  std::vector<torch::Tensor> allocate_buffers(const std::vector<int64_t>& numels,
                                              const std::vector<c10::ScalarType>& dtypes) override {
    if (transports_->has_shared_memory()) {
      // Empty on every rank when /dev/shm cannot hold them: plain tensors, reduced through the slots.
      std::string why_not;
      auto buffers = transports_->shared_memory().allocate_buffers(shared_memory_exchange(), numels, dtypes, &why_not);
      if (!buffers.empty()) return buffers;
      if (rank() == 0 && !said_buffers_fall_back_) {  // once: DDP asks again when it rebuilds its buckets
        said_buffers_fall_back_ = true;
        warn(describe() + ": buffers for reducing in place in shared memory could not be had (" + why_not +
             "): plain tensors, reduced through the shared-memory slots (a copy in and out)");
      }
    }
    return Communicator::allocate_buffers(numels, dtypes);
  }

  CollectiveHandle all_reduce_async(torch::Tensor tensor, ReduceOp op) override {
    arguments_.tensor(tensor, "all_reduce");
    arguments_.mean(tensor, op, "all_reduce");
    auto work_tensor = tensor.is_contiguous() ? tensor : tensor.contiguous();
    const Transport transport = transports_->route(Collective::AllReduce, work_tensor, op);
    if (transport == Transport::Hierarchical) {
      // Note [Hierarchical all_reduce]; on the ring thread where there is one, as through shared memory.
      auto& hierarchy = transports_->hierarchy();
      return start_ring(
          CollectiveKind::AllReduce, work_tensor,
          std::string("(") + op_name(op) + ") hierarchically: shared memory on each host, Gloo among " +
              std::to_string(hierarchy.host_count()) + " hosts",
          [group = &hierarchy, work_tensor, op]() mutable { group->all_reduce(work_tensor, op); },
          copied_back(tensor, work_tensor));
    }
    return start_reduction(
        transport, CollectiveKind::AllReduce, work_tensor, op, std::string("(") + op_name(op) + ")",
        all_reduce_on_process_group(op),
        [](SharedMemoryGroup& group, torch::Tensor& buffer, ReduceOp shm_op) { group.all_reduce(buffer, shm_op); },
        [tensor, op, n = size()](torch::Tensor reduced, bool divided) mutable {
          if (op == ReduceOp::Mean && !divided) reduced.div_(static_cast<double>(n));
          if (!reduced.is_same(tensor)) tensor.copy_(reduced);
          return tensor;
        });
  }

  CollectiveHandle broadcast_async(torch::Tensor tensor, int64_t root) override {
    arguments_.tensor(tensor, "broadcast");
    arguments_.root(root, "broadcast");
    auto work_tensor = tensor.is_contiguous() ? tensor : tensor.contiguous();
    const auto finish = copied_back(tensor, work_tensor);
    if (transports_->route(Collective::Broadcast, work_tensor) == Transport::SharedMemory) {
      return start_ring(
          CollectiveKind::Broadcast, work_tensor, "(root " + std::to_string(root) + ")" + kThroughShm,
          [group = &transports_->shared_memory(), work_tensor, root]() mutable { group->broadcast(work_tensor, root); },
          finish);
    }
    c10d::BroadcastOptions opts;
    opts.rootRank = root;
    opts.timeout = timeout();
    return launch(
        CollectiveKind::Broadcast, work_tensor, "(root " + std::to_string(root) + ")",
        [&] {
          std::vector<at::Tensor> tensors{movable(work_tensor)};
          return process_group_->broadcast(tensors, opts);
        },
        finish);
  }

  CollectiveHandle all_gather_async(const torch::Tensor& tensor) override {
    arguments_.tensor(tensor, "all_gather");
    std::vector<int64_t> shape{size()};
    shape.insert(shape.end(), tensor.sizes().begin(), tensor.sizes().end());
    return start_all_gather(torch::empty(shape, tensor.options()), tensor.contiguous());
  }

  CollectiveHandle all_gather_into_async(torch::Tensor output, const torch::Tensor& input) override {
    arguments_.tensor(input, "all_gather_into");
    arguments_.output(output, input, input.numel() * size(), "all_gather_into", "size() × input.numel()");
    return start_all_gather(std::move(output), input.contiguous());
  }

  CollectiveHandle gather_async(const torch::Tensor& tensor, int64_t root) override {
    arguments_.tensor(tensor, "gather");
    arguments_.root(root, "gather");
    auto input = tensor.contiguous();
    const bool is_root = root == rank();
    torch::Tensor output;
    if (is_root) {
      std::vector<int64_t> shape{size()};
      shape.insert(shape.end(), input.sizes().begin(), input.sizes().end());
      output = torch::empty(shape, input.options());
    }
    // Nothing to move (every rank's input has the same size); Gloo's own would divide by zero.
    if (transports_->route(Collective::Gather, input) == Transport::Nothing) {
      return run_inline(
          CollectiveKind::Gather, input, "", [] {}, [output] { return output; });
    }
    c10d::GatherOptions opts;
    opts.rootRank = root;
    opts.timeout = timeout();
    return launch(
        CollectiveKind::Gather, input, "(root " + std::to_string(root) + ")",
        [&] {
          // c10d copies into these views from a flat buffer of its own.
          std::vector<std::vector<at::Tensor>> outputs;
          if (is_root) {
            const auto wire = movable(output);
            outputs.emplace_back();
            for (int64_t r = 0; r < size(); ++r) outputs[0].push_back(wire[r]);
          }
          std::vector<at::Tensor> inputs{movable(input)};
          return process_group_->gather(outputs, inputs, opts);
        },
        [output] { return output; });
  }

  CollectiveHandle reduce_scatter_async(const torch::Tensor& input, ReduceOp op) override {
    arguments_.tensor(input, "reduce_scatter");
    arguments_.mean(input, op, "reduce_scatter");
    check<ConfigurationError>(input.dim() >= 1 && input.size(0) % size() == 0, describe(),
                              ": reduce_scatter expects an input whose first dimension is a multiple of the "
                              "group size ",
                              size(), ", got shape ", input.sizes(), "; pad the input");
    auto shape = input.sizes().vec();
    shape[0] /= size();
    return start_reduce_scatter(torch::empty(shape, input.options()), input, op);
  }

  CollectiveHandle reduce_scatter_into_async(torch::Tensor output, const torch::Tensor& input, ReduceOp op) override {
    arguments_.tensor(input, "reduce_scatter_into");
    arguments_.mean(input, op, "reduce_scatter_into");
    check<ConfigurationError>(input.numel() % size() == 0, describe(),
                              ": reduce_scatter_into expects an input "
                              "whose number of elements is a multiple of the group size ",
                              size(), ", got ", input.numel(), "; pad the input");
    arguments_.output(output, input, input.numel() / size(), "reduce_scatter_into", "input.numel() / size()");
    return start_reduce_scatter(std::move(output), input, op);
  }

  CollectiveHandle all_gather_chunks_async(torch::Tensor flat, std::vector<int64_t> counts) override {
    arguments_.chunks(flat, counts, "all_gather_chunks");
    const Transport transport = transports_->route(Collective::AllGatherChunks, flat);
    if (transport == Transport::Padding) {
      all_gather_chunks_by_padding(*this, flat, counts);
      return completed(flat);
    }
    const auto own = ring::Chunks(counts).of(flat.view({-1}), rank());
    if (transport == Transport::SharedMemory) {
      count_sent(CollectiveKind::AllGather, payload_bytes(own));  // written once, into the segment
      return start_ring(
          CollectiveKind::AllGather, own, std::string("(chunks)") + kThroughShm,
          [group = &transports_->shared_memory(), own, flat = flat.view({-1}), counts]() mutable {
            group->all_gather(own, flat, counts);
          },
          [flat] { return flat; });
    }
    return start_ring(
        CollectiveKind::AllGather, own, "(chunks)",
        [this, flat, counts]() mutable {
          count_sent(CollectiveKind::AllGather,
                     ring_all_gather_in_place(*process_group_, entry_, rank(), counts, flat, timeout()));
        },
        [flat] { return flat; });
  }

  CollectiveHandle reduce_scatter_chunks_async(torch::Tensor output, const torch::Tensor& input,
                                               std::vector<int64_t> counts, ReduceOp op) override {
    arguments_.chunks(input, counts, "reduce_scatter_chunks");
    arguments_.mean(input, op, "reduce_scatter_chunks");
    arguments_.output(output, input, counts[static_cast<size_t>(rank())], "reduce_scatter_chunks", "counts[rank()]");
    const auto contiguous_input = input.contiguous();
    const Transport transport = transports_->route(Collective::ReduceScatterChunks, contiguous_input, op);
    if (transport == Transport::Padding) {
      reduce_scatter_chunks_by_padding(*this, output, contiguous_input, counts, op);
      return completed(output);
    }
    return start_ring_reduce_scatter(transport, std::move(output), contiguous_input, std::move(counts), op,
                                     "(chunks, ");
  }

  CollectiveHandle reduce_async(torch::Tensor tensor, int64_t root, ReduceOp op) override {
    arguments_.tensor(tensor, "reduce");
    arguments_.root(root, "reduce");
    arguments_.mean(tensor, op, "reduce");
    auto work_tensor = tensor.is_contiguous() ? tensor : tensor.contiguous();
    const bool is_root = root == rank();
    return start_reduction(
        transports_->route(Collective::Reduce, work_tensor, op), CollectiveKind::Reduce, work_tensor, op,
        std::string("(") + op_name(op) + ", root " + std::to_string(root) + ")",
        [this, op, root](at::Tensor& buffer) {
          c10d::ReduceOptions opts;
          opts.reduceOp = to_c10d(op);
          opts.rootRank = root;
          opts.timeout = timeout();
          std::vector<at::Tensor> tensors{buffer};
          return process_group_->reduce(tensors, opts);
        },
        [root](SharedMemoryGroup& group, torch::Tensor& buffer, ReduceOp shm_op) {
          group.reduce(buffer, root, shm_op);
        },
        [tensor, op, is_root, n = size()](torch::Tensor reduced, bool divided) mutable {
          if (is_root && op == ReduceOp::Mean && !divided) reduced.div_(static_cast<double>(n));
          if (!reduced.is_same(tensor)) tensor.copy_(reduced);
          return tensor;
        });
  }

  // Note [Point to point]: through the process group (Gloo's pairs, NCCL's send/recv), one tag
  // for all: between two ranks, c10d matches them in issue order.
  CollectiveHandle send_async(const torch::Tensor& tensor, int64_t peer) override {
    arguments_.tensor(tensor, "send");
    arguments_.peer(peer, rank(), "send");
    auto work_tensor = tensor.contiguous();
    return launch(
        CollectiveKind::Send, work_tensor, "(to rank " + std::to_string(peer) + ")",
        [&] {
          std::vector<at::Tensor> tensors{movable(work_tensor)};
          return process_group_->send(tensors, static_cast<int>(peer), kPointToPointTag);
        },
        [work_tensor] { return work_tensor; }, /*collective=*/false);
  }

  CollectiveHandle recv_async(torch::Tensor tensor, int64_t peer) override {
    arguments_.tensor(tensor, "recv");
    arguments_.peer(peer, rank(), "recv");
    auto work_tensor = tensor.is_contiguous() ? tensor : torch::empty_like(tensor, torch::MemoryFormat::Contiguous);
    return launch(
        CollectiveKind::Recv, work_tensor, "(from rank " + std::to_string(peer) + ")",
        [&] {
          std::vector<at::Tensor> tensors{movable(work_tensor)};
          return process_group_->recv(tensors, static_cast<int>(peer), kPointToPointTag);
        },
        copied_back(tensor, work_tensor), /*collective=*/false);
  }

  CollectiveHandle barrier_async() override {
    c10d::BarrierOptions opts;
    opts.timeout = timeout();
    if (setup_.backend == "nccl")
      opts.device_ids = {setup_.compute_device.index()};  // Note [NCCL and this rank's device]
    if (transports_->route(Collective::Barrier, torch::Tensor()) == Transport::SharedMemory) {
      return start_ring(
          CollectiveKind::Barrier, torch::Tensor(), kThroughShm,
          [group = &transports_->shared_memory()] { group->barrier(); }, [] { return torch::Tensor(); });
    }
    return launch(
        CollectiveKind::Barrier, torch::Tensor(), "", [&] { return process_group_->barrier(opts); },
        [] { return torch::Tensor(); });
  }

  std::shared_ptr<Communicator> new_group(std::vector<int64_t> ranks) override {
    std::sort(ranks.begin(), ranks.end());
    check<ConfigurationError>(!ranks.empty(), describe(), ": new_group expects at least one rank, got none");
    check<ConfigurationError>(std::adjacent_find(ranks.begin(), ranks.end()) == ranks.end(), describe(),
                              ": new_group expects distinct ranks, got a repeated rank");
    check<ConfigurationError>(ranks.front() >= 0 && ranks.back() < size(), describe(),
                              ": new_group expects ranks in [0, ", size(), "), got ",
                              ranks.front() < 0 ? ranks.front() : ranks.back());
    // Every rank counts every new_group call, so that members agree on the key space without
    // talking to non-members.
    const int64_t index = next_group_++;
    auto me = std::find(ranks.begin(), ranks.end(), rank());
    if (me == ranks.end()) return nullptr;
    std::vector<int64_t> global;
    for (const int64_t r : ranks) global.push_back(global_ranks()[static_cast<size_t>(r)]);
    auto store = c10::make_intrusive<c10d::PrefixStore>("group_" + std::to_string(index), setup_.store);
    ProcessGroupSetup setup = setup_;
    setup.store = std::move(store);
    return std::make_shared<ProcessGroupCommunicator>(me - ranks.begin(), static_cast<int64_t>(ranks.size()),
                                                      std::move(global), std::move(setup), false);
  }

  void report_failure(const std::string& message) override {
    if (setup_.monitor) setup_.monitor->report_failure(message);
  }

 private:
  using ProcessGroupReduction = std::function<c10::intrusive_ptr<c10d::Work>(at::Tensor& buffer)>;

  ProcessGroupReduction all_reduce_on_process_group(ReduceOp op) {
    return [this, op](at::Tensor& buffer) {
      c10d::AllreduceOptions opts;
      opts.reduceOp = to_c10d(op);
      opts.timeout = timeout();
      std::vector<at::Tensor> tensors{buffer};
      return process_group_->allreduce(tensors, opts);
    };
  }

  // Note [bfloat16 over Gloo]
  // c10d's Gloo backend in LibTorch 1.13 has no bfloat16 (its collectives throw "Invalid scalar
  // type"), and no int16 either; from 2.2 on it reduces bfloat16 itself (compat::
  // kGlooReducesBfloat16), each pairwise sum in float rounded to bfloat16. volt carries bfloat16
  // CPU tensors on either:
  //  - data movement (broadcast, all_gather, all_gather_into, gather) hands Gloo the tensor
  //    reinterpreted as Half, the other 2-byte type it carries. Gloo only copies those bytes, so
  //    every bit pattern arrives intact (NaN payloads too), at 2 bytes an element.
  //  - reduce_scatter runs volt's ring (Note [Ring reduce_scatter]), which sums with LibTorch: natively.
  //  - the other reductions (all_reduce, reduce) run on the inline Gloo context (Note
  //    [Inline all_reduce]) with a bfloat16 reduction function: each pairwise sum is computed in
  //    float and rounded to bfloat16 (c10::BFloat16's own operator+), and every rank ends with the
  //    same bits. At any size, not only below inline_all_reduce_max_bytes: a bfloat16 compression
  //    hook exists to put 2 bytes an element on the wire. The price: they block the calling
  //    thread, so a large one does not overlap with backward. bf16_reduction() is "native".
  //  - without the inline context (a LibTorch with its own Gloo inside compiles it out,
  //    inline_all_reduce_max_bytes = 0 turns it off, a group of one has none): on LibTorch 2.2+
  //    the process group reduces the bfloat16 tensor itself, 2 bytes an element, the same
  //    pairwise rounding ("native"); before 2.2 reductions go through float32: convert, reduce
  //    on the process group, convert back. 4 bytes an element; one rounding at the end, so the
  //    last bit can differ from the native path's. bf16_reduction() is "float32" then.
  // Counters count what is handed to the wire: 2 or 4 bytes an element. NCCL (CUDA tensors)
  // reduces bfloat16 itself; none of this applies there.
  bool gloo_bf16(const torch::Tensor& tensor) const {
    return setup_.backend == "gloo" && tensor.scalar_type() == torch::kBFloat16;
  }
  // The tensor Gloo moves for `tensor`: itself, or a bfloat16 one viewed as Half (same storage).
  at::Tensor movable(const torch::Tensor& tensor) const {
    return gloo_bf16(tensor) ? tensor.view(torch::kHalf) : tensor;
  }
  // An all_gather of bytes over the process group, for the shared-memory group's setup.
  SharedMemoryGroup::Exchange shared_memory_exchange() {
    return [this](const std::string& bytes) {
      return all_gather_bytes_unnumbered(*process_group_, entry_, this->size(), timeout(), bytes);
    };
  }

  // Reduces `buffer` (contiguous; reduced in place) as collective `kind` on `transport`: through
  // shared memory by `on_shared_memory` (Note [Collectives through shared memory]; Mean divided
  // there); on this thread through the inline context (Note [Inline all_reduce]); else on the
  // process group through `on_process_group` (in float32 for bfloat16, Note [bfloat16 over
  // Gloo]). The handle's result is `finish(the reduced buffer, whether a Mean is already divided)`.
  CollectiveHandle start_reduction(Transport transport, CollectiveKind kind, torch::Tensor buffer, ReduceOp op,
                                   std::string detail, const ProcessGroupReduction& on_process_group,
                                   std::function<void(SharedMemoryGroup&, torch::Tensor&, ReduceOp)> on_shared_memory,
                                   std::function<torch::Tensor(torch::Tensor, bool)> finish) {
    if (transport == Transport::SharedMemory) {
      // On the ring thread where there is one, so that it overlaps with backward like Gloo's own.
      return start_ring(
          kind, buffer, detail + kThroughShm,
          [group = &transports_->shared_memory(), buffer, op, run = std::move(on_shared_memory)]() mutable {
            run(*group, buffer, op);
          },
          [buffer, finish = std::move(finish)] { return finish(buffer, true); });
    }
    // Otherwise Mean is the finisher's division of the sum.
    if (transport == Transport::Inline) {
      return run_inline(
          kind, buffer, detail, [&] { transports_->inline_all_reduce().run(buffer, op); },
          [buffer, finish = std::move(finish)] { return finish(buffer, false); });
    }
    if (gloo_bf16(buffer) && !compat::kGlooReducesBfloat16) {
      buffer = buffer.to(torch::kFloat);
      detail += " via float32";
    }
    return launch(
        kind, buffer, detail, [&] { return on_process_group(buffer); },
        [buffer, finish = std::move(finish)] { return finish(buffer, false); });
  }

  // `output` (checked) gets every rank's contiguous `input`.
  CollectiveHandle start_all_gather(torch::Tensor output, torch::Tensor input) {
    // Nothing to move (every rank's input has the same size); Gloo's own would divide by zero.
    const Transport transport = transports_->route(Collective::AllGather, input);
    if (transport == Transport::Nothing) {
      return run_inline(
          CollectiveKind::AllGather, input, "", [] {}, [output] { return output; });
    }
    if (transport == Transport::SharedMemory) {
      count_sent(CollectiveKind::AllGather, payload_bytes(input));  // written once, into the segment
      return start_ring(
          CollectiveKind::AllGather, input, kThroughShm,
          [group = &transports_->shared_memory(), input, flat = output.view({-1}), n = size()]() mutable {
            group->all_gather(input.view({-1}), flat, std::vector<int64_t>(static_cast<size_t>(n), input.numel()));
          },
          [output] { return output; });
    }
    c10d::AllgatherOptions opts;
    opts.timeout = timeout();
    // Gloo's all_gather (and NCCL's) is a ring: this rank sends its input to one neighbour and
    // forwards n-2 others' inputs, (n-1)/n of the output.
    count_sent(CollectiveKind::AllGather, (size() - 1) * payload_bytes(input));
    auto wire_in = movable(input);
    auto wire_out = movable(output).view({-1});
#if defined(VOLT_WITH_CUDA)
    if (setup_.backend == "nccl") {
      return launch(
          CollectiveKind::AllGather, input, "",
          [&] { return process_group_->_allgather_base(wire_out, wire_in, opts); }, [output] { return output; });
    }
#endif
    return launch(
        CollectiveKind::AllGather, input, "",
        [&] {
          // Gloo gathers into a flat buffer of its own, then copies into these views.
          const int64_t n = input.numel();
          std::vector<std::vector<at::Tensor>> outputs(1);
          for (int64_t r = 0; r < size(); ++r) outputs[0].push_back(wire_out.narrow(0, r * n, n).view(input.sizes()));
          std::vector<at::Tensor> inputs{wire_in};
          return process_group_->allgather(outputs, inputs, opts);
        },
        [output] { return output; });
  }

  // Note [Gloo reduce_scatter]: c10d's Gloo backend (1.13 and 2.x) has no reduce_scatter; volt
  // runs the ring algorithm itself over the process group's send/recv (Note [Ring
  // reduce_scatter]): each rank sends (n-1)/n of the input, half an all_reduce's traffic, counted
  // as the collective's sent bytes. It runs on the communicator's ring thread where it has one
  // (Note [Ring collectives off the calling thread]). NCCL uses its native reduce_scatter (the
  // same ring), straight from `input` into `output`.
  CollectiveHandle start_reduce_scatter(torch::Tensor output, const torch::Tensor& input, ReduceOp op) {
    const std::string detail = std::string("(") + op_name(op) + ")";
    const int64_t n = size();
    const auto contiguous_input = input.contiguous();
    const Transport transport = transports_->route(Collective::ReduceScatter, contiguous_input, op);
#if defined(VOLT_WITH_CUDA)
    if (transport == Transport::ProcessGroup) {
      c10d::ReduceScatterOptions opts;
      opts.reduceOp = to_c10d(op);
      opts.timeout = timeout();
      auto wire_in = contiguous_input.view({-1});
      auto wire_out = output.view({-1});
      count_sent(CollectiveKind::ReduceScatter, (n - 1) * payload_bytes(output));
      return launch(
          CollectiveKind::ReduceScatter, wire_in, detail,
          [&] { return process_group_->_reduce_scatter_base(wire_out, wire_in, opts); },
          [output, op, n]() mutable {
            if (op == ReduceOp::Mean) output.div_(static_cast<double>(n));
            return output;
          });
    }
#endif
    return start_ring_reduce_scatter(transport, std::move(output), contiguous_input,
                                     std::vector<int64_t>(static_cast<size_t>(n), output.numel()), op, "(");
  }

  // Runs a reduce_scatter of the contiguous `contiguous_input` through shared memory, or on volt's
  // ring (Note [Ring reduce_scatter]), counting the bytes it sends.
  CollectiveHandle start_ring_reduce_scatter(Transport transport, torch::Tensor output,
                                             const torch::Tensor& contiguous_input, std::vector<int64_t> counts,
                                             ReduceOp op, const std::string& detail_prefix) {
    if (transport == Transport::SharedMemory) {
      count_sent(CollectiveKind::ReduceScatter, payload_bytes(contiguous_input));  // written once, into the segment
      return start_ring(
          CollectiveKind::ReduceScatter, contiguous_input, detail_prefix + op_name(op) + ")" + kThroughShm,
          [group = &transports_->shared_memory(), output, contiguous_input, counts, op]() mutable {
            auto flat = output.view({-1});
            group->reduce_scatter(contiguous_input.view({-1}), flat, counts, op);
          },
          [output] { return output; });
    }
    return start_ring(
        CollectiveKind::ReduceScatter, contiguous_input, detail_prefix + op_name(op) + ")",
        [this, output, contiguous_input, counts, op]() mutable {
          count_sent(CollectiveKind::ReduceScatter, ring_reduce_scatter(*process_group_, entry_, rank(), counts, output,
                                                                        contiguous_input, op, timeout()));
        },
        [output] { return output; });
  }

  // One of volt's rings: on the ring thread when this communicator has one (Note [Ring
  // collectives off the calling thread]), else run to completion on the calling thread.
  template <typename Finish>
  CollectiveHandle start_ring(CollectiveKind kind, const torch::Tensor& payload, const std::string& detail,
                              std::function<void()> ring, Finish&& finish) {
    RingWorker* rings = transports_->rings();
    if (!rings) return run_inline(kind, payload, detail, ring, std::forward<Finish>(finish));
    // The submission enqueues nothing on c10d (what the ring enqueues goes through entry_ itself).
    return start_work(
        kind, payload, detail, [&] { return rings->submit(std::move(ring)); }, std::forward<Finish>(finish));
  }

  // A handle for work that already completed (counted by the collectives it ran), with `result`.
  static CollectiveHandle completed(torch::Tensor result) {
    auto state = std::make_shared<CollectiveHandle::State>();
    state->done = true;
    state->result = std::move(result);
    return CollectiveHandle(std::move(state));
  }

  // A collective run to completion on this thread (Note [Inline all_reduce]): counted, numbered
  // and reported like one on the process group; the handle it returns is already complete.
  template <typename Run, typename Finish>
  CollectiveHandle run_inline(CollectiveKind kind, const torch::Tensor& payload, const std::string& detail, Run&& run,
                              Finish&& finish) {
    auto state = begin(kind, payload, detail, std::forward<Finish>(finish));
    // Blocked here until it completes (Note [Diagnosing a hang]).
    BlockedIn blocked(state->monitor, state->position);
    try {
      run();
    } catch (const std::exception& e) {
      throw collective_failure(*state, e);
    }
    return CollectiveHandle(std::move(state));
  }

  // A collective that `start` enqueues on the process group (through entry_: Note [Entering c10d
  // from several threads]).
  // `collective`: false for a send or receive (Note [Point to point]).
  template <typename Start, typename Finish>
  CollectiveHandle launch(CollectiveKind kind, const torch::Tensor& payload, const std::string& detail, Start&& start,
                          Finish&& finish, bool collective = true) {
    return start_work(
        kind, payload, detail, [&] { return entry_.enter(start); }, std::forward<Finish>(finish), collective);
  }

  // A collective whose Work `start` returns.
  template <typename Start, typename Finish>
  CollectiveHandle start_work(CollectiveKind kind, const torch::Tensor& payload, const std::string& detail,
                              Start&& start, Finish&& finish, bool collective = true) {
    auto state = begin(kind, payload, detail, std::forward<Finish>(finish), collective);
    try {
      state->work = start();
    } catch (const std::exception& e) {
      throw DistributedError(failure_message(*state, cause_of(e)));
    }
    return CollectiveHandle(std::move(state));
  }

  // Counts and numbers a collective about to start; the state says what it is in errors. A send
  // or receive (`collective` false) is numbered apart and leaves the monitor's progress alone
  // (Note [Point to point]).
  template <typename Finish>
  std::shared_ptr<CollectiveHandle::State> begin(CollectiveKind kind, const torch::Tensor& payload,
                                                 const std::string& detail, Finish&& finish, bool collective = true) {
    const int64_t bytes = payload_bytes(payload);
    count(kind, bytes);
    auto state = std::make_shared<CollectiveHandle::State>();
    const int64_t number = collective ? ++sequence_ : ++point_to_point_sequence_;
    state->what = describe() + ": " + to_string(kind) + " #" + std::to_string(number) + detail +
                  (payload.defined() ? " of " + std::to_string(bytes) + " bytes" : "");
    state->timeout = timeout();
    state->stream_ordered = setup_.backend == "nccl";  // Note [Waiting for NCCL without blocking the host]
    state->finish = std::forward<Finish>(finish);
    if (setup_.monitor) {
      if (setup_.monitor->hang_check().interval.count() > 0) {
        // Note [Diagnosing a hang]: in the ring, and the position this rank waits in, if it blocks.
        state->position = {.known = true,
                           .blocked = true,
                           .group = group_text_,
                           .sequence = number,
                           .kind = to_string(kind),
                           .bytes = bytes,
                           .dtype = payload.defined() ? std::string(c10::toString(payload.scalar_type())) : "",
                           .site = current_collective_site(),
                           .point_to_point = !collective};
        setup_.monitor->record(state->position);
        state->monitor = setup_.monitor;
      }
      // Note [Naming the failed rank]: only the root communicator's numbering is comparable
      // across ranks (every rank runs the same root collectives); sub-groups pass -1.
      const bool root_collective = is_root_ && collective;
      const int64_t comparable = root_collective ? sequence_ : -1;
      if (root_collective) setup_.monitor->set_progress(sequence_);
      state->diagnose = [monitor = setup_.monitor, comparable] { return monitor->diagnose(comparable); };
    }
    return state;
  }

  // This group's global ranks, "0,1,2,3": how a hang report names it (Note [Diagnosing a hang]).
  std::string group_text_ = [this] {
    std::string text;
    for (const int64_t r : global_ranks()) text += (text.empty() ? "" : ",") + std::to_string(r);
    return text;
  }();
  ProcessGroupSetup setup_;  // its timeout is timeout(); the monitor is shared with the sub-groups
  CollectiveArguments arguments_;
  bool is_root_;
  c10::intrusive_ptr<compat::C10dBackend> process_group_;
  C10dEntry entry_;  // every call that enqueues on process_group_ (Note [Entering c10d from several threads])
  std::unique_ptr<Transports> transports_;  // what carries each collective (Note [One route per collective])
  bool said_buffers_fall_back_ = false;     // rank 0 warned that allocate_buffers fell back
  int64_t next_group_ = 0;
  int64_t sequence_ = 0;
  int64_t point_to_point_sequence_ = 0;
};

}  // namespace

std::shared_ptr<Communicator> make_process_group_communicator(int64_t rank, int64_t size, ProcessGroupSetup setup) {
  std::vector<int64_t> global_ranks(static_cast<size_t>(size));
  for (int64_t r = 0; r < size; ++r) global_ranks[static_cast<size_t>(r)] = r;
  return std::make_shared<ProcessGroupCommunicator>(rank, size, std::move(global_ranks), std::move(setup), true);
}

}  // namespace volt
