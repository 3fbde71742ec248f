// Communicator::connect: the rendezvous through a TCPStore, the Gloo network device, the peer
// monitor's connection, then the root communicator over them (process_group_communicator.cpp).
#include <cstdlib>

#include "core/error.h"
#include "distributed/collective_handle_state.h"
#include "distributed/host_staged_communicator.h"
#include "distributed/network.h"
#include "distributed/process_group_communicator.h"

namespace volt {

namespace {

std::string resolve_backend(const CommunicatorOptions& options) {
  std::string backend = options.backend;
  if (backend == "auto") backend = options.device.is_cuda() ? "nccl" : "gloo";
  if (backend == "nccl") {
#if !defined(VOLT_WITH_CUDA)
    throw NotSupportedError(
        "Communicator: backend nccl needs a LibTorch built with CUDA; this one is "
        "CPU-only. Use backend gloo (CPU tensors)");
#else
    // c10d's NCCL group is created lazily: without this check a missing device surfaced only at
    // the first collective, as a CUDA error from inside NCCL.
    const auto visible = torch::cuda::device_count();
    check<NotSupportedError>(options.device.index() < visible, "Communicator (rank ", options.rank,
                             "): backend nccl computes on ", options.device.str(), ", but LibTorch sees ",
                             visible == 0 ? std::string("no CUDA device") : std::to_string(visible) + " CUDA device(s)",
                             " on this machine; use backend gloo (CPU tensors), or run where the device is visible "
                             "(CUDA_VISIBLE_DEVICES)");
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
  ignore_broken_pipe_signal();
  const std::string backend = resolve_backend(options);
  const std::string who =
      "Communicator (rank " + std::to_string(options.rank) + " of " + std::to_string(options.world_size) + ")";
  const bool host_store = options.rank == 0 && !options.store_is_external;
  // A process alone hosts a store that only it connects to: it binds any free port itself (port
  // 0, chosen by the kernel as it binds). A port found free earlier (find_free_port) can be taken
  // in between by another process on the host, as a listening port or as a connection's source
  // port: ctest's parallel single-process runs met EADDRINUSE that way.
  // A port of 0 asks for the same: the rank that hosts the store tells on_store_bound which it got.
  const bool alone = host_store && (options.world_size == 1 || options.master_port == 0);
  int64_t port = options.master_port;
  std::string where = options.master_addr + ":" + std::to_string(port);
  c10::intrusive_ptr<c10d::Store> store;
  try {
    c10d::TCPStoreOptions store_options;
    store_options.port = alone ? 0 : static_cast<std::uint16_t>(options.master_port);
    store_options.isServer = host_store;
    store_options.numWorkers = static_cast<std::size_t>(options.world_size);
    store_options.waitWorkers = false;  // the process group's rendezvous waits, bounded by the timeout
    store_options.timeout = options.timeout;
    auto tcp_store = c10::make_intrusive<c10d::TCPStore>(options.master_addr, store_options);
    port = tcp_store->getPort();
    where = options.master_addr + ":" + std::to_string(port);
    store = std::move(tcp_store);
  } catch (const std::exception& e) {
    const std::string cause = cause_of(e);
    throw DistributedError(who + (host_store
                                      ? ": cannot start the rendezvous store on " + where + ": " + cause +
                                            "; is the port in use? Choose another --master-port"
                                      : ": cannot reach the rendezvous store at " + where + " within the timeout of " +
                                            std::to_string(options.timeout.count()) + " ms: " + cause +
                                            "; check that rank 0 is running and --master-addr/--master-port"));
  }
  if (host_store && options.on_store_bound) options.on_store_bound(port);
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
      client.port = static_cast<std::uint16_t>(port);
      client.timeout = options.timeout;
      c10::intrusive_ptr<c10d::Store> connection = c10::make_intrusive<c10d::TCPStore>(options.master_addr, client);
      if (!options.store_prefix.empty()) {
        connection = c10::make_intrusive<c10d::PrefixStore>(options.store_prefix, connection);
      }
      monitor = std::make_shared<PeerMonitor>(c10::make_intrusive<c10d::PrefixStore>("volt/monitor", connection),
                                              options.rank, options.world_size, options.heartbeat_interval, host,
                                              options.hang_check);
    } catch (const std::exception& e) {
      throw DistributedError(who + ": cannot open the monitoring connection to the store at " + where + ": " +
                             cause_of(e));
    }
  }
  auto communicator = make_process_group_communicator(options.rank, options.world_size,
                                                      {.backend = backend,
                                                       .timeout = options.timeout,
                                                       .store = std::move(store),
                                                       .device = std::move(device),
                                                       .compute_device = options.device,
                                                       .monitor = std::move(monitor),
                                                       .inline_max_bytes = options.inline_all_reduce_max_bytes,
                                                       .ring_thread = options.ring_thread,
                                                       .shared_memory = options.shared_memory,
                                                       .host_id = options.host_id});
  // Note [Device tensors on Gloo]: a rank computing on a CUDA device over gloo.
  if (backend == "gloo" && options.device.is_cuda()) {
    return stage_device_tensors_through_host(std::move(communicator), options.device);
  }
  return communicator;
}

}  // namespace volt
