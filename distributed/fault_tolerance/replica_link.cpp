#include "distributed/fault_tolerance/replica_link.h"

#include <atomic>
#include <cstring>
#include <random>
#include <sstream>
#include <thread>

#include "distributed/c10d_compat.h"
#include "distributed/communicator.h"
#include "distributed/fault_tolerance/lighthouse_protocol.h"

namespace volt {

namespace lp = lighthouse_protocol;

void ReplicaLinkOptions::validate() const {
  check<ConfigurationError>(replicas >= 1, "--fault-tolerance: replicas expects a value >= 1, got ", replicas);
  check<ConfigurationError>(replica >= 0 && replica < replicas, "--fault-tolerance: replica expects a value in [0, ",
                            replicas, ") (replicas), got ", replica);
  check<ConfigurationError>(replica_size >= 1 && replica_rank >= 0 && replica_rank < replica_size,
                            "--fault-tolerance: rank ", replica_rank, " of a replica of ", replica_size, " processes");
  check<ConfigurationError>(lighthouse_port >= 1 && lighthouse_port <= 65535,
                            "--fault-tolerance: lighthouse expects HOST:PORT with a port in [1, 65535], got port ",
                            lighthouse_port);
  check<ConfigurationError>(timeout.count() > 0 && quorum_timeout.count() > 0 && heartbeat_interval.count() > 0,
                            "--fault-tolerance: timeouts and the heartbeat interval must be > 0");
}

struct ReplicaLink::Store {
  c10::intrusive_ptr<c10d::Store> store;
  uint64_t nonce = 0;
  int64_t seq = 0;
  std::atomic<bool> stopping{false};
  std::thread heartbeat;

  ~Store() {
    stopping.store(true);
    if (heartbeat.joinable()) heartbeat.join();
  }
};

namespace {

c10::intrusive_ptr<c10d::Store> connect_store(const ReplicaLinkOptions& options, std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions client;
  client.port = static_cast<std::uint16_t>(options.lighthouse_port);
  client.isServer = false;
  client.timeout = timeout;
  return c10::make_intrusive<c10d::TCPStore>(options.lighthouse_host, client);
}

}  // namespace

ReplicaLink::ReplicaLink(const ReplicaLinkOptions& options) : options_(options), store_(std::make_unique<Store>()) {
  options_.validate();
  const std::string where = options_.lighthouse_host + ":" + std::to_string(options_.lighthouse_port);
  try {
    store_->store = c10::make_intrusive<c10d::PrefixStore>(lp::kPrefix, connect_store(options_, options_.timeout));
  } catch (const std::exception& e) {
    throw DistributedError("--fault-tolerance: replica " + std::to_string(options_.replica) +
                           " cannot reach the lighthouse at " + where + ": " + e.what() +
                           "; start it first (volt-lighthouse --replicas " + std::to_string(options_.replicas) +
                           " --port " + std::to_string(options_.lighthouse_port) + ") and check lighthouse=HOST:PORT");
  }
  std::random_device entropy;
  store_->nonce = (static_cast<uint64_t>(entropy()) << 32) ^ entropy() ^
                  static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
}

ReplicaLink::~ReplicaLink() { disconnect(); }

Quorum ReplicaLink::request_quorum(int64_t step, bool last_step_failed) {
  VOLT_INTERNAL_ASSERT(options_.replica_rank == 0, "only a replica's rank 0 asks for a quorum");
  auto& s = *store_;
  const std::string heartbeat = lp::heartbeat_key(options_.replica);
  if (!s.heartbeat.joinable()) {
    s.store->add(heartbeat, 1);
    // A connection of its own: c10d's store clients are not meant for two threads at once.
    auto beat_store = c10::make_intrusive<c10d::PrefixStore>(lp::kPrefix, connect_store(options_, options_.timeout));
    s.heartbeat = std::thread([&s, beat_store, heartbeat, interval = options_.heartbeat_interval] {
      while (!s.stopping.load()) {
        try {
          beat_store->add(heartbeat, 1);
        } catch (const std::exception&) {
          // The lighthouse is gone: the next request fails with a message that says so.
        }
        std::this_thread::sleep_for(interval);
      }
    });
  }
  lp::JoinRequest request{.replicas = options_.replicas,
                          .nonce = s.nonce,
                          .seq = s.seq++,
                          .step = step,
                          .failed = last_step_failed,
                          .fingerprint = options_.fingerprint};
  const std::string key = lp::answer_key(options_.replica, request.nonce, request.seq);
  const std::string where = options_.lighthouse_host + ":" + std::to_string(options_.lighthouse_port);
  std::string answer;
  try {
    s.store->set(lp::request_key(options_.replica), [&] {
      const auto text = request.encode();
      return std::vector<uint8_t>(text.begin(), text.end());
    }());
    const auto deadline = std::chrono::steady_clock::now() + options_.quorum_timeout;
    while (!s.store->check({key})) {
      if (std::chrono::steady_clock::now() >= deadline) {
        const auto status = s.store->check({lp::kStatusKey}) ? s.store->get(lp::kStatusKey) : std::vector<uint8_t>{};
        std::ostringstream message;
        message << "--fault-tolerance: replica " << options_.replica << " found no quorum within "
                << options_.quorum_timeout.count() / 1000.0 << " s; the lighthouse at " << where
                << " says: " << std::string(status.begin(), status.end())
                << "; start the replicas that are down, or lower the lighthouse's --min-replicas";
        throw DistributedError(message.str());
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    const auto bytes = s.store->get(key);
    answer.assign(bytes.begin(), bytes.end());
  } catch (const DistributedError&) {
    throw;
  } catch (const std::exception& e) {
    throw DistributedError("--fault-tolerance: replica " + std::to_string(options_.replica) +
                           " lost the lighthouse at " + where + ": " + e.what());
  }
  if (answer.rfind("error ", 0) == 0) throw ConfigurationError("--fault-tolerance: " + answer.substr(6));
  check<DistributedError>(answer.rfind("ok ", 0) == 0, "--fault-tolerance: the lighthouse answered '", answer, "'");
  return Quorum::decode(answer.substr(3), "the lighthouse's answer");
}

bool ReplicaLink::fail(const std::string& what, const std::exception& e) {
  last_error_ = what + ": " + e.what();
  disconnect();
  return false;
}

bool ReplicaLink::connect(const Quorum& quorum) {
  if (connected_ && quorum.generation == quorum_.generation) {
    quorum_ = quorum;
    return true;
  }
  disconnect();
  quorum_ = quorum;
  const int64_t index = quorum.index_of(options_.replica);
  VOLT_INTERNAL_ASSERT(index >= 0, "replica ", options_.replica, " is not in quorum ", quorum.id);
  if (quorum.members.size() == 1) {
    connected_ = true;
    return true;
  }
  try {
    CommunicatorOptions group;
    group.rank = index;
    group.world_size = static_cast<int64_t>(quorum.members.size());
    group.master_addr = options_.lighthouse_host;
    group.master_port = options_.lighthouse_port;
    group.store_is_external = true;
    group.store_prefix = lp::group_prefix(quorum.generation, options_.replica_rank);
    group.timeout = options_.timeout;
    group.backend = "gloo";
    group.device = options_.device;
    group.heartbeat_interval = std::chrono::milliseconds(0);
    group_ = Communicator::connect(group);
    connected_ = true;
    return true;
  } catch (const std::exception& e) {
    return fail("connecting the cross-replica group of quorum #" + std::to_string(quorum.id), e);
  }
}

bool ReplicaLink::all_reduce_sum(torch::Tensor& tensor) {
  if (!connected_) {
    last_error_ = "not connected";
    return false;
  }
  if (!group_) return true;
  try {
    group_->all_reduce(tensor, ReduceOp::Sum);
    return true;
  } catch (const std::exception& e) {
    return fail("averaging gradients over quorum #" + std::to_string(quorum_.id), e);
  }
}

bool ReplicaLink::send(const std::string& bytes, int64_t to) {
  if (!connected_ || !group_) {
    last_error_ = "not connected";
    return false;
  }
  try {
    auto size = torch::tensor({static_cast<int64_t>(bytes.size())}, torch::kLong);
    const int64_t peer = quorum_.index_of(to);
    group_->send(size, peer);
    auto data = torch::empty({static_cast<int64_t>(bytes.size())}, torch::kUInt8);
    std::memcpy(data.data_ptr(), bytes.data(), bytes.size());
    group_->send(data, peer);
    return true;
  } catch (const std::exception& e) {
    return fail("sending the training state to replica " + std::to_string(to), e);
  }
}

std::optional<std::string> ReplicaLink::receive(int64_t from) {
  if (!connected_ || !group_) {
    last_error_ = "not connected";
    return std::nullopt;
  }
  try {
    auto size = torch::zeros({1}, torch::kLong);
    const int64_t peer = quorum_.index_of(from);
    group_->recv(size, peer);
    auto data = torch::empty({size.item<int64_t>()}, torch::kUInt8);
    group_->recv(data, peer);
    return std::string(static_cast<const char*>(data.data_ptr()), static_cast<size_t>(data.numel()));
  } catch (const std::exception& e) {
    fail("receiving the training state from replica " + std::to_string(from), e);
    return std::nullopt;
  }
}

void ReplicaLink::disconnect() {
  group_.reset();
  connected_ = false;
}

}  // namespace volt
