#include "distributed/fault_tolerance/lighthouse.h"

#include <atomic>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include "distributed/c10d_compat.h"
#include "distributed/fault_tolerance/lighthouse_protocol.h"
#include "distributed/fault_tolerance/quorum.h"

namespace volt {

namespace lp = lighthouse_protocol;
using Clock = std::chrono::steady_clock;

void LighthouseOptions::validate() const {
  check<ConfigurationError>(port >= 0 && port <= 65535, "lighthouse: port expects a port in [0, 65535], got ", port);
  check<ConfigurationError>(replicas >= 1, "lighthouse: replicas expects a value >= 1, got ", replicas);
  check<ConfigurationError>(min_replicas >= 1 && min_replicas <= replicas,
                            "lighthouse: min_replicas expects a value in [1, ", replicas, "] (the replicas), got ",
                            min_replicas);
  check<ConfigurationError>(join_timeout.count() > 0, "lighthouse: join_timeout expects a value > 0");
  check<ConfigurationError>(heartbeat_timeout.count() > 0, "lighthouse: heartbeat_timeout expects a value > 0");
}

namespace {

std::string text_of(const std::vector<uint8_t>& bytes) { return {bytes.begin(), bytes.end()}; }
std::vector<uint8_t> bytes_of(const std::string& text) { return {text.begin(), text.end()}; }

std::string list(const std::vector<int64_t>& replicas) {
  std::string out;
  for (const auto r : replicas) out += (out.empty() ? "" : ", ") + std::to_string(r);
  return out.empty() ? "none" : out;
}

}  // namespace

struct Lighthouse::Impl {
  // What the lighthouse knows of one replica.
  struct ReplicaState {
    int64_t beats = 0;
    Clock::time_point last_beat;
    std::string answered;  // "<nonce>/<seq>" of the last request answered
    std::optional<lp::JoinRequest> pending;
    // The process whose request was refused (another model): not counted alive, so that the others
    // do not wait for it, until a process of another nonce asks.
    std::optional<uint64_t> refused;
    Clock::time_point pending_since;
  };

  LighthouseOptions options;
  c10::intrusive_ptr<c10d::TCPStore> server;
  c10::intrusive_ptr<c10d::Store> store;
  std::atomic<bool> stopping{false};
  std::atomic<int64_t> quorums{0};
  mutable std::mutex status_mutex;
  std::string status;
  std::thread thread;

  std::vector<ReplicaState> replicas;
  std::string fingerprint;  // the first request's
  int64_t first_fingerprint_replica = -1;
  int64_t generation = 0;
  std::vector<int64_t> last_members;

  void set_status(const std::string& text) {
    std::lock_guard<std::mutex> lock(status_mutex);
    if (text == status) return;
    status = text;
    store->set(lp::kStatusKey, bytes_of(text));
  }

  void answer(int64_t replica, const lp::JoinRequest& request, const std::string& text) {
    store->set(lp::answer_key(replica, request.nonce, request.seq), bytes_of(text));
    replicas[static_cast<size_t>(replica)].answered = std::to_string(request.nonce) + "/" + std::to_string(request.seq);
    replicas[static_cast<size_t>(replica)].pending.reset();
  }

  void read_replica(int64_t r, Clock::time_point now) {
    auto& state = replicas[static_cast<size_t>(r)];
    const int64_t beats = store->add(lp::heartbeat_key(r), 0);
    if (beats != state.beats) {
      state.beats = beats;
      state.last_beat = now;
    }
    if (!store->check({lp::request_key(r)})) return;
    const auto request = lp::JoinRequest::decode(text_of(store->get(lp::request_key(r))));
    const std::string id = std::to_string(request.nonce) + "/" + std::to_string(request.seq);
    if (id == state.answered ||
        (state.pending && state.pending->nonce == request.nonce && state.pending->seq == request.seq)) {
      return;
    }
    if (request.replicas != options.replicas) {
      state.refused = request.nonce;
      state.pending = request;
      answer(r, request,
             "error the lighthouse serves " + std::to_string(options.replicas) + " replicas, but replica " +
                 std::to_string(r) + " was started with replicas=" + std::to_string(request.replicas) +
                 "; start every replica and the lighthouse with the same count");
      return;
    }
    if (fingerprint.empty()) {
      fingerprint = request.fingerprint;
      first_fingerprint_replica = r;
    } else if (request.fingerprint != fingerprint) {
      state.refused = request.nonce;
      answer(r, request,
             "error replica " + std::to_string(r) + " joins with a model or replica size (fingerprint " +
                 request.fingerprint + ") other than replica " + std::to_string(first_fingerprint_replica) + "'s (" +
                 fingerprint +
                 "); every replica must build the same model, with the same strategy and number of processes");
      return;
    }
    state.refused.reset();
    state.pending = request;
    state.pending_since = now;
  }

  bool alive(const ReplicaState& state, Clock::time_point now) const {
    return state.beats > 0 && now - state.last_beat < options.heartbeat_timeout && !state.refused;
  }

  void decide(Clock::time_point now) {
    std::vector<int64_t> asked, waiting;
    std::optional<Clock::time_point> first;
    for (int64_t r = 0; r < options.replicas; ++r) {
      const auto& state = replicas[static_cast<size_t>(r)];
      if (!alive(state, now)) continue;
      if (state.pending) {
        asked.push_back(r);
        if (!first || state.pending_since < *first) first = state.pending_since;
      } else {
        waiting.push_back(r);
      }
    }
    if (asked.empty()) {
      set_status("no replica is asking to join; the last quorum was #" + std::to_string(quorums.load()) +
                 " of replicas " + list(last_members));
      return;
    }
    const bool everyone = waiting.empty();
    if (static_cast<int64_t>(asked.size()) < options.min_replicas) {
      set_status("replicas " + list(asked) + " ask to join, but a quorum needs " +
                 std::to_string(options.min_replicas) + " (min_replicas); alive and not asking: " + list(waiting));
      return;
    }
    if (!everyone && now - *first < options.join_timeout) {
      set_status("replicas " + list(asked) + " ask to join; waiting for live replicas " + list(waiting));
      return;
    }
    Quorum quorum;
    quorum.id = quorums.load() + 1;
    bool failed = false;
    for (const auto r : asked) {
      const auto& request = *replicas[static_cast<size_t>(r)].pending;
      quorum.members.push_back({r, request.step, request.seq == 0});
      failed = failed || request.failed || request.seq == 0;
    }
    if (failed || asked != last_members) ++generation;
    quorum.generation = generation;
    last_members = asked;
    const std::string text = "ok " + quorum.encode();
    for (const auto r : asked) answer(r, *replicas[static_cast<size_t>(r)].pending, text);
    quorums.store(quorum.id);
    set_status("formed quorum #" + std::to_string(quorum.id) + " of replicas " + list(asked) +
               (everyone ? "" : " without live replicas " + list(waiting) + " (join_timeout)"));
  }

  void run() {
    while (!stopping.load()) {
      try {
        const auto now = Clock::now();
        for (int64_t r = 0; r < options.replicas; ++r) read_replica(r, now);
        decide(now);
      } catch (const std::exception& e) {
        set_status(std::string("lighthouse error: ") + e.what());
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
};

Lighthouse::Lighthouse(const LighthouseOptions& options) : impl_(std::make_unique<Impl>()) {
  options.validate();
  impl_->options = options;
  impl_->replicas.resize(static_cast<size_t>(options.replicas));
  try {
    c10d::TCPStoreOptions store_options;
    store_options.port = static_cast<std::uint16_t>(options.port);
    store_options.isServer = true;
    store_options.waitWorkers = false;
    store_options.timeout = std::chrono::seconds(60);
    impl_->server = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", store_options);
  } catch (const std::exception& e) {
    throw DistributedError("lighthouse: cannot start its store on port " + std::to_string(options.port) + ": " +
                           e.what() + "; is the port in use? Choose another --port");
  }
  impl_->store = c10::make_intrusive<c10d::PrefixStore>(lp::kPrefix, impl_->server);
  impl_->set_status("no replica has asked to join yet");
  impl_->thread = std::thread([this] { impl_->run(); });
}

Lighthouse::~Lighthouse() {
  impl_->stopping.store(true);
  if (impl_->thread.joinable()) impl_->thread.join();
}

int64_t Lighthouse::port() const { return impl_->server->getPort(); }
int64_t Lighthouse::quorums() const { return impl_->quorums.load(); }
std::string Lighthouse::status() const {
  std::lock_guard<std::mutex> lock(impl_->status_mutex);
  return impl_->status;
}

}  // namespace volt
