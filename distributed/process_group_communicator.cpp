// The c10d half of Communicator: rendezvous through a TCPStore, a Gloo (or NCCL) process group,
// and the collectives on it with volt's timeouts, counters and error messages.
#include <cstdlib>

#include "distributed/c10d_compat.h"
#include "distributed/communicator.h"
#include "distributed/inline_gloo_all_reduce.h"
#include "distributed/peer_monitor.h"
#include "core/error.h"
#include "distributed/network.h"

namespace volt {

// ---------------------------------------------------------------------------------------------
// CollectiveHandle

struct CollectiveHandle::State {
  c10::intrusive_ptr<c10d::Work> work;         // null when nothing is in flight
  std::function<torch::Tensor()> finish;       // after the work: copy back, divide, slice
  std::vector<std::function<torch::Tensor(const torch::Tensor&)>> continuations;
  std::chrono::milliseconds timeout{0};
  std::string what;                            // "Communicator (rank 1 of 2): all_reduce #7 ..."
  std::function<std::string()> diagnose;       // why peers may have failed (may be empty)
  bool done = false;
  torch::Tensor result;
};

namespace {

std::string failure_message(const CollectiveHandle::State& state, const std::string& cause) {
  std::string message = state.what + " failed: " + cause;
  if (state.diagnose) {
    std::string diagnosis;
    try {
      diagnosis = state.diagnose();
    } catch (const std::exception&) {
      // Diagnosis is best effort; the failure itself is what must be reported.
    }
    if (!diagnosis.empty()) message += ". " + diagnosis;
  }
  return message;
}

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

// The first line of an error's message, without c10's backtrace.
std::string cause_of(const std::exception& e) {
  if (const auto* c10_error = dynamic_cast<const c10::Error*>(&e)) return first_line(c10_error->what_without_backtrace());
  return first_line(e.what());
}

// The error for a collective that failed with `e` (c10d's or Gloo's), told apart: a timeout
// (with what to do) or a peer's failure.
DistributedError collective_failure(const CollectiveHandle::State& s, const std::exception& e) {
  const std::string cause = cause_of(e);
  // c10d: "Operation timed out!"; Gloo's event loop: "Timed out waiting ..."; Gloo's sync-mode
  // sockets (the inline path): "Read timeout ..." / "Write timeout ...".
  bool timed_out = false;
  for (const char* marker : {"timed out", "Timed out", "Read timeout", "Write timeout"}) {
    timed_out |= cause.find(marker) != std::string::npos;
  }
  return DistributedError(failure_message(
      s, timed_out ? "it did not complete within the timeout of " + std::to_string(s.timeout.count()) + " ms (" +
                         cause + "): a peer is stalled or took another code path; raise --timeout "
                         "if the work between collectives is legitimately that slow"
                   : cause));
}

}  // namespace

torch::Tensor CollectiveHandle::wait() {
  if (!state_) return {};
  State& s = *state_;
  if (s.done) return s.result;
  try {
    if (s.work) {
      // Work::wait throws "Operation timed out!" past the timeout, or the backend's error.
      s.work->wait(s.timeout);
      s.work.reset();
    }
  } catch (const std::exception& e) {
    throw collective_failure(s, e);
  }
  torch::Tensor result = s.finish ? s.finish() : torch::Tensor();
  for (auto& continuation : s.continuations) result = continuation(result);
  s.result = result;
  s.done = true;
  s.finish = nullptr;
  s.continuations.clear();
  return s.result;
}

bool CollectiveHandle::is_completed() const {
  if (!state_ || state_->done || !state_->work) return true;
  return state_->work->isCompleted();
}

CollectiveHandle CollectiveHandle::then(std::function<torch::Tensor(const torch::Tensor&)> continuation) && {
  if (!state_) {
    auto state = std::make_shared<State>();
    state->done = true;
    state->result = continuation(torch::Tensor());
    return CollectiveHandle(std::move(state));
  }
  if (state_->done) {
    state_->result = continuation(state_->result);
  } else {
    state_->continuations.push_back(std::move(continuation));
  }
  return CollectiveHandle(std::move(state_));
}

// ---------------------------------------------------------------------------------------------
// ProcessGroupCommunicator

namespace {

c10d::ReduceOp to_c10d(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Mean: return c10d::ReduceOp::SUM;  // Mean: SUM, then divided (Gloo has no AVG)
    case ReduceOp::Max: return c10d::ReduceOp::MAX;
    case ReduceOp::Min: return c10d::ReduceOp::MIN;
  }
  return c10d::ReduceOp::SUM;
}

const char* op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Mean: return "mean";
    case ReduceOp::Max: return "max";
    case ReduceOp::Min: return "min";
  }
  return "?";
}

int64_t payload_bytes(const torch::Tensor& t) {
  return t.defined() ? t.numel() * static_cast<int64_t>(t.element_size()) : 0;
}

std::string resolve_backend(const CommunicatorOptions& options) {
  std::string backend = options.backend;
  if (backend == "auto") backend = options.device.is_cuda() ? "nccl" : "gloo";
  if (backend == "nccl") {
#if !defined(VOLT_WITH_CUDA)
    throw NotSupportedError("Communicator: backend nccl needs a LibTorch built with CUDA; this one is "
                            "CPU-only. Use backend gloo (CPU tensors)");
#endif
  }
  return backend;
}

std::shared_ptr<gloo::transport::Device> make_gloo_device(const CommunicatorOptions& options) {
  try {
    if (!options.bind_address.empty()) {
      return c10d::ProcessGroupGloo::createDeviceForHostname(options.bind_address);
    }
    if (const char* interface = std::getenv("GLOO_SOCKET_IFNAME"); interface && *interface) {
      return c10d::ProcessGroupGloo::createDeviceForInterface(interface);
    }
    return c10d::ProcessGroupGloo::createDeviceForHostname(local_address_towards(options.master_addr));
  } catch (const c10::Error& e) {
    throw DistributedError("Communicator (rank " + std::to_string(options.rank) +
                           "): cannot create a Gloo network device: " + cause_of(e) +
                           "; set GLOO_SOCKET_IFNAME to the interface that reaches the other ranks");
  }
}

// Builds the backend's process group over `store` (a rendezvous among `size` ranks).
c10::intrusive_ptr<compat::C10dBackend> make_process_group(const std::string& backend,
                                                           const c10::intrusive_ptr<c10d::Store>& store,
                                                           int64_t rank, int64_t size,
                                                           const std::shared_ptr<gloo::transport::Device>& device,
                                                           std::chrono::milliseconds timeout) {
#if defined(VOLT_WITH_CUDA)
  if (backend == "nccl") {
    auto options = c10d::ProcessGroupNCCL::Options::create();
    options->timeout = timeout;
    return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, static_cast<int>(rank), static_cast<int>(size),
                                                       options);
  }
#endif
  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  options->devices.push_back(device);
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, static_cast<int>(rank), static_cast<int>(size),
                                                     options);
}

class ProcessGroupCommunicator : public Communicator {
 public:
  // `store` is this communicator's own key space; the process group and every sub-group get a
  // prefix inside it.
  ProcessGroupCommunicator(int64_t rank, int64_t size, std::vector<int64_t> global_ranks,
                           std::chrono::milliseconds timeout, std::string backend,
                           c10::intrusive_ptr<c10d::Store> store,
                           std::shared_ptr<gloo::transport::Device> device, std::shared_ptr<PeerMonitor> monitor,
                           bool is_root, int64_t inline_max_bytes)
      : Communicator(rank, size, std::move(global_ranks), timeout),
        backend_name_(std::move(backend)),
        store_(std::move(store)),
        device_(std::move(device)),
        monitor_(std::move(monitor)),
        is_root_(is_root),
        inline_max_bytes_(inline_max_bytes) {
    try {
      process_group_ = make_process_group(backend_name_, c10::make_intrusive<c10d::PrefixStore>("pg", store_),
                                          rank, size, device_, timeout);
      if (backend_name_ == "gloo" && size > 1 && inline_max_bytes_ > 0 && InlineGlooAllReduce::compiled_in()) {
        inline_ = std::make_unique<InlineGlooAllReduce>(c10::make_intrusive<c10d::PrefixStore>("inline", store_),
                                                        rank, size, device_, timeout, inline_max_bytes_);
      }
    } catch (const std::exception& e) {
      throw DistributedError(describe() + ": could not connect to the other " + std::to_string(size - 1) +
                             " rank(s) within the timeout of " + std::to_string(timeout.count()) +
                             " ms: " + cause_of(e) +
                             ". Check that every rank was started, with the same world size, and that "
                             "the ranks can reach each other (GLOO_SOCKET_IFNAME)");
    }
  }

  std::string backend_name() const override { return backend_name_; }

  CollectiveHandle all_reduce_async(torch::Tensor tensor, ReduceOp op) override {
    check_tensor(tensor, "all_reduce");
    check_mean(tensor, op, "all_reduce");
    auto work_tensor = tensor.is_contiguous() ? tensor : tensor.contiguous();
    auto finish = [tensor, work_tensor, op, n = size()]() mutable {
      if (op == ReduceOp::Mean) work_tensor.div_(static_cast<double>(n));
      if (!work_tensor.is_same(tensor)) tensor.copy_(work_tensor);
      return tensor;
    };
    const std::string detail = std::string("(") + op_name(op) + ")";
    if (inline_ && inline_->accepts(work_tensor, op)) {
      return run_inline(CollectiveKind::AllReduce, work_tensor, detail,
                        [&] { inline_->run(work_tensor, op); }, std::move(finish));
    }
    return launch(CollectiveKind::AllReduce, work_tensor, detail,
                  [&] {
                    c10d::AllreduceOptions opts;
                    opts.reduceOp = to_c10d(op);
                    opts.timeout = timeout();
                    std::vector<at::Tensor> tensors{work_tensor};
                    return process_group_->allreduce(tensors, opts);
                  },
                  std::move(finish));
  }

  CollectiveHandle broadcast_async(torch::Tensor tensor, int64_t root) override {
    check_tensor(tensor, "broadcast");
    check_root(root, "broadcast");
    auto work_tensor = tensor.is_contiguous() ? tensor : tensor.contiguous();
    c10d::BroadcastOptions opts;
    opts.rootRank = root;
    opts.timeout = timeout();
    return launch(CollectiveKind::Broadcast, work_tensor, "(root " + std::to_string(root) + ")",
                  [&] {
                    std::vector<at::Tensor> tensors{work_tensor};
                    return process_group_->broadcast(tensors, opts);
                  },
                  [tensor, work_tensor]() mutable {
                    if (!work_tensor.is_same(tensor)) tensor.copy_(work_tensor);
                    return tensor;
                  });
  }

  CollectiveHandle all_gather_async(const torch::Tensor& tensor) override {
    check_tensor(tensor, "all_gather");
    auto input = tensor.contiguous();
    std::vector<int64_t> shape{size()};
    shape.insert(shape.end(), input.sizes().begin(), input.sizes().end());
    auto output = torch::empty(shape, input.options());
    c10d::AllgatherOptions opts;
    opts.timeout = timeout();
    return launch(CollectiveKind::AllGather, input, "",
                  [&] {
                    std::vector<std::vector<at::Tensor>> outputs(1);
                    for (int64_t r = 0; r < size(); ++r) outputs[0].push_back(output[r]);
                    std::vector<at::Tensor> inputs{input};
                    return process_group_->allgather(outputs, inputs, opts);
                  },
                  [output] { return output; });
  }

  // Note [Gloo reduce_scatter]: c10d's Gloo backend (1.13 and 2.x) has no reduce_scatter. volt
  // builds it from all_reduce: reduce a copy of the whole input, keep this rank's chunk. The
  // result is exact (the same sums as a native reduce_scatter, in the same order per element);
  // the cost is an all_reduce's traffic, ~2·(n-1)/n of the input per rank instead of (n-1)/n.
  // NCCL uses its native reduce_scatter.
  CollectiveHandle reduce_scatter_async(const torch::Tensor& input, ReduceOp op) override {
    check_tensor(input, "reduce_scatter");
    check_mean(input, op, "reduce_scatter");
    check<ConfigurationError>(input.dim() >= 1 && input.size(0) % size() == 0, describe(),
                              ": reduce_scatter expects an input whose first dimension is a multiple of the "
                              "group size ", size(), ", got shape ", input.sizes(), "; pad the input");
    const int64_t n = size(), me = rank();
    c10d::AllreduceOptions opts;
    opts.reduceOp = to_c10d(op);
    opts.timeout = timeout();
    if (backend_name_ == "gloo") {
      auto buffer = input.contiguous().clone();
      return launch(CollectiveKind::ReduceScatter, input, std::string("(") + op_name(op) + ")",
                    [&] {
                      std::vector<at::Tensor> tensors{buffer};
                      return process_group_->allreduce(tensors, opts);
                    },
                    [buffer, op, n, me] {
                      auto chunk = buffer.chunk(n)[me].clone();
                      if (op == ReduceOp::Mean) chunk.div_(static_cast<double>(n));
                      return chunk;
                    });
    }
    auto chunks = input.contiguous().chunk(n);
    auto output = torch::empty_like(chunks[static_cast<size_t>(me)]);
    c10d::ReduceScatterOptions rs_opts;
    rs_opts.reduceOp = opts.reduceOp;
    rs_opts.timeout = timeout();
    return launch(CollectiveKind::ReduceScatter, input, std::string("(") + op_name(op) + ")",
                  [&] {
                    std::vector<at::Tensor> outputs{output};
                    std::vector<std::vector<at::Tensor>> inputs{std::vector<at::Tensor>(chunks.begin(), chunks.end())};
                    return process_group_->reduce_scatter(outputs, inputs, rs_opts);
                  },
                  [output, op, n]() mutable {
                    if (op == ReduceOp::Mean) output.div_(static_cast<double>(n));
                    return output;
                  });
  }

  CollectiveHandle reduce_async(torch::Tensor tensor, int64_t root, ReduceOp op) override {
    check_tensor(tensor, "reduce");
    check_root(root, "reduce");
    check_mean(tensor, op, "reduce");
    auto work_tensor = tensor.is_contiguous() ? tensor : tensor.contiguous();
    c10d::ReduceOptions opts;
    opts.reduceOp = to_c10d(op);
    opts.rootRank = root;
    opts.timeout = timeout();
    const bool is_root = root == rank();
    return launch(CollectiveKind::Reduce, work_tensor,
                  std::string("(") + op_name(op) + ", root " + std::to_string(root) + ")",
                  [&] {
                    std::vector<at::Tensor> tensors{work_tensor};
                    return process_group_->reduce(tensors, opts);
                  },
                  [tensor, work_tensor, op, is_root, n = size()]() mutable {
                    if (is_root && op == ReduceOp::Mean) work_tensor.div_(static_cast<double>(n));
                    if (!work_tensor.is_same(tensor)) tensor.copy_(work_tensor);
                    return tensor;
                  });
  }

  CollectiveHandle barrier_async() override {
    c10d::BarrierOptions opts;
    opts.timeout = timeout();
    return launch(CollectiveKind::Barrier, torch::Tensor(), "",
                  [&] { return process_group_->barrier(opts); }, [] { return torch::Tensor(); });
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
    auto store = c10::make_intrusive<c10d::PrefixStore>("group_" + std::to_string(index), store_);
    return std::make_shared<ProcessGroupCommunicator>(me - ranks.begin(), static_cast<int64_t>(ranks.size()),
                                                      std::move(global), timeout(), backend_name_,
                                                      std::move(store), device_, monitor_, false, inline_max_bytes_);
  }

  void report_failure(const std::string& message) override {
    if (monitor_) monitor_->report_failure(message);
  }

 private:
  // A collective run to completion on this thread (Note [Inline all_reduce]): counted, numbered
  // and reported like one on the process group; the handle it returns is already complete.
  template <typename Run, typename Finish>
  CollectiveHandle run_inline(CollectiveKind kind, const torch::Tensor& payload, const std::string& detail, Run&& run,
                              Finish&& finish) {
    auto state = begin(kind, payload, detail, std::forward<Finish>(finish));
    try {
      run();
    } catch (const std::exception& e) {
      throw collective_failure(*state, e);
    }
    return CollectiveHandle(std::move(state));
  }

  template <typename Start, typename Finish>
  CollectiveHandle launch(CollectiveKind kind, const torch::Tensor& payload, const std::string& detail,
                          Start&& start, Finish&& finish) {
    auto state = begin(kind, payload, detail, std::forward<Finish>(finish));
    try {
      state->work = start();
    } catch (const std::exception& e) {
      throw DistributedError(failure_message(*state, cause_of(e)));
    }
    return CollectiveHandle(std::move(state));
  }

  // Counts and numbers a collective about to start; the state says what it is in errors.
  template <typename Finish>
  std::shared_ptr<CollectiveHandle::State> begin(CollectiveKind kind, const torch::Tensor& payload,
                                                 const std::string& detail, Finish&& finish) {
    const int64_t bytes = payload_bytes(payload);
    count(kind, bytes);
    auto state = std::make_shared<CollectiveHandle::State>();
    state->what = describe() + ": " + to_string(kind) + " #" + std::to_string(++sequence_) + detail +
                  (payload.defined() ? " of " + std::to_string(bytes) + " bytes" : "");
    state->timeout = timeout();
    state->finish = std::forward<Finish>(finish);
    if (monitor_) {
      // Note [Naming the failed rank]: only the root communicator's numbering is comparable
      // across ranks (every rank runs the same root collectives); sub-groups pass -1.
      const int64_t comparable = is_root_ ? sequence_ : -1;
      if (is_root_) monitor_->set_progress(sequence_);
      state->diagnose = [monitor = monitor_, comparable] { return monitor->diagnose(comparable); };
    }
    return state;
  }

  void check_tensor(const torch::Tensor& tensor, const char* what) const {
    check<ConfigurationError>(tensor.defined(), describe(), ": ", what, " expects a defined tensor, got an undefined one");
    check<ConfigurationError>(tensor.layout() == torch::kStrided, describe(), ": ", what,
                              " expects a dense tensor, got layout ", tensor.layout());
    check<ConfigurationError>(backend_name_ != "nccl" || tensor.is_cuda(), describe(), ": ", what,
                              " on the nccl backend expects a CUDA tensor, got one on ", tensor.device());
  }

  void check_mean(const torch::Tensor& tensor, ReduceOp op, const char* what) const {
    check<ConfigurationError>(op != ReduceOp::Mean || tensor.is_floating_point(), describe(), ": ", what,
                              " with ReduceOp::Mean expects a floating-point tensor, got ", tensor.dtype(),
                              "; use Sum and divide, or convert the tensor");
  }

  void check_root(int64_t root, const char* what) const {
    check<ConfigurationError>(root >= 0 && root < size(), describe(), ": ", what, " expects a root rank in [0, ",
                              size(), "), got ", root);
  }

  std::string backend_name_;
  c10::intrusive_ptr<c10d::Store> store_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<PeerMonitor> monitor_;  // shared by the root communicator and its sub-groups
  bool is_root_;
  int64_t inline_max_bytes_;
  c10::intrusive_ptr<compat::C10dBackend> process_group_;
  std::unique_ptr<InlineGlooAllReduce> inline_;  // null: every collective on the process group
  int64_t next_group_ = 0;
  int64_t sequence_ = 0;
};

// Rank 0 publishes its world size before anyone builds a process group, so that a rank started
// with another world size fails at once with both numbers instead of timing out in Gloo.
void check_world_size(c10d::Store& store, const CommunicatorOptions& options) {
  const std::string key = "world_size";
  const auto mine = std::to_string(options.world_size);
  if (options.rank == 0) {
    store.set(key, std::vector<uint8_t>(mine.begin(), mine.end()));
    return;
  }
  const auto value = store.get(key);
  const std::string theirs(value.begin(), value.end());
  check<DistributedError>(theirs == mine, "Communicator (rank ", options.rank, " of ", options.world_size,
                          "): rank 0 was started with world size ", theirs, " but this rank with ", mine,
                          "; start every rank with the same --devices and --num-nodes");
}

}  // namespace

std::shared_ptr<Communicator> Communicator::connect(const CommunicatorOptions& options) {
  options.validate();
  const std::string backend = resolve_backend(options);
  const std::string who = "Communicator (rank " + std::to_string(options.rank) + " of " +
                          std::to_string(options.world_size) + ")";
  const bool host_store = options.rank == 0 && !options.store_is_external;
  const std::string where = options.master_addr + ":" + std::to_string(options.master_port);
  c10::intrusive_ptr<c10d::Store> store;
  try {
    c10d::TCPStoreOptions store_options;
    store_options.port = static_cast<std::uint16_t>(options.master_port);
    store_options.isServer = host_store;
    store_options.numWorkers = static_cast<std::size_t>(options.world_size);
    store_options.waitWorkers = false;  // the process group's rendezvous waits, bounded by the timeout
    store_options.timeout = options.timeout;
    store = c10::make_intrusive<c10d::TCPStore>(options.master_addr, store_options);
  } catch (const std::exception& e) {
    const std::string cause = cause_of(e);
    throw DistributedError(
        who + (host_store ? ": cannot start the rendezvous store on " + where + ": " + cause +
                                "; is the port in use? Choose another --master-port"
                          : ": cannot reach the rendezvous store at " + where + " within the timeout of " +
                                std::to_string(options.timeout.count()) + " ms: " + cause +
                                "; check that rank 0 is running and --master-addr/--master-port"));
  }
  if (!options.store_prefix.empty()) store = c10::make_intrusive<c10d::PrefixStore>(options.store_prefix, store);
  store = c10::make_intrusive<c10d::PrefixStore>("volt", store);
  try {
    check_world_size(*store, options);
  } catch (const c10::Error& e) {
    throw DistributedError(who + ": rendezvous through the store at " + where + " failed: " + cause_of(e));
  }
  auto device = backend == "gloo" ? make_gloo_device(options) : nullptr;
  std::shared_ptr<PeerMonitor> monitor;
  if (options.heartbeat_interval.count() > 0) {
    const std::string host = options.store_is_external ? "the torchelastic agent at " + where : "rank 0 at " + where;
    try {
      c10d::TCPStoreOptions client;
      client.port = static_cast<std::uint16_t>(options.master_port);
      client.timeout = options.timeout;
      c10::intrusive_ptr<c10d::Store> connection = c10::make_intrusive<c10d::TCPStore>(options.master_addr, client);
      if (!options.store_prefix.empty()) {
        connection = c10::make_intrusive<c10d::PrefixStore>(options.store_prefix, connection);
      }
      monitor = std::make_shared<PeerMonitor>(c10::make_intrusive<c10d::PrefixStore>("volt/monitor", connection),
                                              options.rank, options.world_size, options.heartbeat_interval, host);
    } catch (const std::exception& e) {
      throw DistributedError(who + ": cannot open the monitoring connection to the store at " + where + ": " +
                             cause_of(e));
    }
  }
  std::vector<int64_t> global_ranks(static_cast<size_t>(options.world_size));
  for (int64_t r = 0; r < options.world_size; ++r) global_ranks[static_cast<size_t>(r)] = r;
  return std::make_shared<ProcessGroupCommunicator>(options.rank, options.world_size, std::move(global_ranks),
                                                    options.timeout, backend, std::move(store), std::move(device),
                                                    std::move(monitor), true, options.inline_all_reduce_max_bytes);
}

}  // namespace volt
