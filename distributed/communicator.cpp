// The backend-independent half of Communicator: options, the blocking forms of the collectives,
// node groups and counters. The c10d half is process_group_communicator.cpp.
#include "distributed/communicator.h"

#include <set>

#include "core/error.h"
#include "distributed/padded_bytes.h"
#include "distributed/staged_collective.h"

namespace volt {

void CommunicatorOptions::validate() const {
  check<ConfigurationError>(world_size >= 1, "Communicator: expected world_size >= 1, got ", world_size);
  check<ConfigurationError>(rank >= 0 && rank < world_size, "Communicator: expected a rank in [0, ",
                            world_size, "), got ", rank);
  check<ConfigurationError>(!master_addr.empty(), "Communicator: expected a master address, got ''; "
                            "set --master-addr or MASTER_ADDR");
  const bool hosts_store = rank == 0 && !store_is_external;
  check<ConfigurationError>(master_port >= (hosts_store ? 0 : 1) && master_port <= 65535,
                            "Communicator: expected a master port in [", hosts_store ? 0 : 1, ", 65535], got ",
                            master_port, "; set --master-port or MASTER_PORT");
  check<ConfigurationError>(timeout.count() > 0, "Communicator: expected a timeout > 0 ms, got ",
                            timeout.count(), " ms; set --timeout in seconds");
  check<ConfigurationError>(heartbeat_interval.count() >= 0,
                            "Communicator: expected a heartbeat interval >= 0 ms, got ", heartbeat_interval.count());
  check<ConfigurationError>(inline_all_reduce_max_bytes >= 0,
                            "Communicator: expected inline_all_reduce_max_bytes >= 0 (0 turns it off), got ",
                            inline_all_reduce_max_bytes);
  check<ConfigurationError>(hang_check.interval.count() >= 0 && hang_check.interval < timeout,
                            "Communicator: expected a hang check interval in [0, timeout ", timeout.count(),
                            " ms) (0 turns it off), got ", hang_check.interval.count(),
                            " ms; a check after the timeout would never run: lower --hang-check or raise --timeout");
  check<ConfigurationError>(backend == "auto" || backend == "gloo" || backend == "nccl",
                            "Communicator: expected backend gloo, nccl or auto, got '", backend, "'");
  check<ConfigurationError>(backend != "nccl" || (device.is_cuda() && device.has_index()),
                            "Communicator: backend nccl binds its communicators to this rank's CUDA device, so it "
                            "expects `device` to be one (cuda:<local rank>), got ", device.str(),
                            "; pass the device this rank computes on");
}

Communicator::Communicator(int64_t rank, int64_t size, std::vector<int64_t> global_ranks,
                           std::chrono::milliseconds timeout)
    : rank_(rank), size_(size), global_ranks_(std::move(global_ranks)), timeout_(timeout) {}

// Note [CPU tensors on a device's backend]
// NCCL moves only tensors on the rank's device (Note [NCCL and this rank's device]), yet much of
// what ranks agree on is small and lives on the CPU: lengths before a byte gather, node ranks,
// model fingerprints, the used-parameter flags, a logger's version, a decision, a user's metric.
// The blocking collectives take such a tensor on any backend, as torch.distributed's object
// collectives and Lightning's reduce/broadcast do: they copy it to tensor_device(), run there and
// copy the result back into the caller's tensor (or return it on the caller's device). The
// asynchronous forms, which carry the gradients and parameters of every step, refuse a CPU
// tensor: a copy each step, hidden, would cost what overlapping them is for.
namespace {

// Where `tensor` goes for `communicator`: the communicator's device for a CPU tensor on a device's
// backend, else nowhere (it runs as it is).
std::optional<torch::Device> staging_for(const Communicator& communicator, const torch::Tensor& tensor) {
  const auto device = communicator.tensor_device();
  if (tensor.defined() && tensor.is_cpu() && !device.is_cpu()) return device;
  return std::nullopt;
}

// `tensor` where `communicator` moves tensors: itself, or a copy there.
torch::Tensor staged(const Communicator& communicator, const torch::Tensor& tensor) {
  return staging::on(tensor, staging_for(communicator, tensor));
}

// Runs the collective that `start` starts on `tensor`'s stand-in there, and waits for its result
// on `tensor`'s device (read: `start` takes the staged tensor).
template <typename Start>
torch::Tensor returned(const Communicator& communicator, const torch::Tensor& tensor, Start&& start) {
  const auto where = staging_for(communicator, tensor);
  return staging::returned_on(tensor, where.has_value(), start(staging::on(tensor, where))).wait();
}

// Runs `collective` on `tensor` where `communicator` moves tensors and waits, leaving the result in
// `tensor`. `read`: whether the collective reads the tensor's contents (an output only, such as
// all_gather_into's, is not copied to the device first).
template <typename Collective>
void in_place(const Communicator& communicator, const torch::Tensor& tensor, bool read, Collective&& collective) {
  staging::in_place(tensor, staging_for(communicator, tensor), read, std::forward<Collective>(collective)).wait();
}

}  // namespace

void Communicator::all_reduce(torch::Tensor& tensor, ReduceOp op) {
  in_place(*this, tensor, true, [&](const torch::Tensor& t) { return all_reduce_async(t, op); });
}

void Communicator::broadcast(torch::Tensor& tensor, int64_t root) {
  in_place(*this, tensor, true, [&](const torch::Tensor& t) { return broadcast_async(t, root); });
}

torch::Tensor Communicator::all_gather(const torch::Tensor& tensor) {
  return returned(*this, tensor, [&](const torch::Tensor& t) { return all_gather_async(t); });
}

torch::Tensor Communicator::reduce_scatter(const torch::Tensor& input, ReduceOp op) {
  return returned(*this, input, [&](const torch::Tensor& t) { return reduce_scatter_async(t, op); });
}

void Communicator::reduce(torch::Tensor& tensor, int64_t root, ReduceOp op) {
  in_place(*this, tensor, true, [&](const torch::Tensor& t) { return reduce_async(t, root, op); });
}

void Communicator::barrier() { barrier_async().wait(); }

void Communicator::send(const torch::Tensor& tensor, int64_t peer) { send_async(staged(*this, tensor), peer).wait(); }

void Communicator::recv(torch::Tensor& tensor, int64_t peer) {
  in_place(*this, tensor, false, [&](const torch::Tensor& t) { return recv_async(t, peer); });
}

torch::Tensor Communicator::gather(const torch::Tensor& tensor, int64_t root) {
  return returned(*this, tensor, [&](const torch::Tensor& t) { return gather_async(t, root); });
}

void Communicator::all_gather_into(torch::Tensor output, const torch::Tensor& input) {
  const auto source = staged(*this, input);
  in_place(*this, output, false, [&](const torch::Tensor& t) { return all_gather_into_async(t, source); });
}

void Communicator::reduce_scatter_into(torch::Tensor output, const torch::Tensor& input, ReduceOp op) {
  const auto source = staged(*this, input);
  in_place(*this, output, false, [&](const torch::Tensor& t) { return reduce_scatter_into_async(t, source, op); });
}

void Communicator::all_gather_chunks(torch::Tensor flat, const std::vector<int64_t>& counts) {
  // Reads this rank's own chunk.
  in_place(*this, flat, true, [&](const torch::Tensor& t) { return all_gather_chunks_async(t, counts); });
}

void Communicator::reduce_scatter_chunks(torch::Tensor output, const torch::Tensor& input,
                                         const std::vector<int64_t>& counts, ReduceOp op) {
  const auto source = staged(*this, input);
  in_place(*this, output, false,
           [&](const torch::Tensor& t) { return reduce_scatter_chunks_async(t, source, counts, op); });
}

// Gloo needs equal sizes on every rank: first every rank learns every length (one all_gather of
// an int64 each), then the bytes travel padded to the longest.
std::vector<std::string> Communicator::all_gather_bytes(const std::string& bytes) {
  const auto lengths = all_gather(torch::tensor({static_cast<int64_t>(bytes.size())}, torch::kLong)).flatten();
  const int64_t longest = lengths.max().item<int64_t>();
  auto rows = torch::zeros({size(), longest}, torch::kByte);
  if (longest > 0) all_gather_into(rows, padded_bytes(bytes, longest));
  return unpad_rows(rows, lengths);
}

std::vector<std::string> Communicator::gather_bytes(const std::string& bytes, int64_t root) {
  check<ConfigurationError>(root >= 0 && root < size(), describe(), ": gather_bytes expects a root rank in [0, ",
                            size(), "), got ", root);
  const auto lengths = all_gather(torch::tensor({static_cast<int64_t>(bytes.size())}, torch::kLong)).flatten();
  const int64_t longest = lengths.max().item<int64_t>();
  if (longest == 0)
    return rank() == root ? std::vector<std::string>(static_cast<size_t>(size())) : std::vector<std::string>{};
  const auto rows = gather(padded_bytes(bytes, longest), root);
  return rank() == root ? unpad_rows(rows, lengths) : std::vector<std::string>{};
}

Communicator::NodeGroups Communicator::node_groups(int64_t node_rank) {
  check<ConfigurationError>(node_rank >= 0, describe(), ": expected a node rank >= 0, got ", node_rank);
  const auto gathered = all_gather(torch::tensor({node_rank}, torch::kLong));
  const int64_t* nodes = gathered.data_ptr<int64_t>();
  std::set<int64_t> distinct(nodes, nodes + size());
  NodeGroups groups;
  std::vector<int64_t> leaders;
  // Every rank creates every node's group in the same (node) order; only members connect.
  for (const int64_t node : distinct) {
    std::vector<int64_t> members;
    for (int64_t r = 0; r < size(); ++r) {
      if (nodes[r] == node) members.push_back(r);
    }
    leaders.push_back(members.front());
    auto group = new_group(members);
    if (node == node_rank) groups.local = std::move(group);
  }
  groups.leaders = new_group(leaders);
  return groups;
}

std::shared_ptr<Communicator> Communicator::new_subgroups(int64_t group_size) {
  check<ConfigurationError>(group_size >= 1 && size() % group_size == 0, describe(),
                            ": new_subgroups expects a group size that divides the group's size ", size(), ", got ",
                            group_size, "; choose a divisor of ", size());
  std::shared_ptr<Communicator> mine;
  for (int64_t first = 0; first < size(); first += group_size) {
    std::vector<int64_t> members(static_cast<size_t>(group_size));
    for (int64_t i = 0; i < group_size; ++i) members[static_cast<size_t>(i)] = first + i;
    auto group = new_group(members);
    if (group) mine = std::move(group);
  }
  return mine;
}

std::vector<torch::Tensor> Communicator::allocate_buffers(const std::vector<int64_t>& numels,
                                                         const std::vector<c10::ScalarType>& dtypes) {
  std::vector<torch::Tensor> buffers;
  for (size_t i = 0; i < numels.size(); ++i) buffers.push_back(torch::zeros({numels[i]}, torch::dtype(dtypes.at(i))));
  return buffers;
}

CollectiveCounters Communicator::counters() const {
  std::lock_guard<std::mutex> lock(counters_mutex_);
  return counters_;
}

void Communicator::reset_counters() {
  std::lock_guard<std::mutex> lock(counters_mutex_);
  counters_ = {};
}

void Communicator::count(CollectiveKind kind, int64_t bytes) {
  std::lock_guard<std::mutex> lock(counters_mutex_);
  auto& c = counters_[kind];
  ++c.calls;
  c.bytes += bytes;
}

void Communicator::count_sent(CollectiveKind kind, int64_t bytes) {
  std::lock_guard<std::mutex> lock(counters_mutex_);
  counters_[kind].sent_bytes += bytes;
}

std::string Communicator::describe() const {
  std::string text = "Communicator (rank " + std::to_string(rank_) + " of " + std::to_string(size_);
  const int64_t global = global_ranks_.at(static_cast<size_t>(rank_));
  if (global != rank_) text += ", global rank " + std::to_string(global);
  return text + ")";
}

}  // namespace volt
