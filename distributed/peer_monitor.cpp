#include "distributed/peer_monitor.h"

#include <map>
#include <sstream>

namespace volt {
namespace {

std::vector<uint8_t> bytes(const std::string& text) { return {text.begin(), text.end()}; }

std::string text(const std::vector<uint8_t>& value) { return {value.begin(), value.end()}; }

struct Beat {
  int64_t count = -1;     // -1: no heartbeat published yet
  int64_t progress = -1;
};

}  // namespace

PeerMonitor::PeerMonitor(c10::intrusive_ptr<c10d::Store> store, int64_t rank, int64_t world_size,
                         std::chrono::milliseconds interval, std::string store_host)
    : store_(std::move(store)), rank_(rank), world_size_(world_size), interval_(interval),
      store_host_(std::move(store_host)) {
  thread_ = std::thread([this] { beat_loop(); });
}

PeerMonitor::~PeerMonitor() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  stop_requested_.notify_all();
  thread_.join();
}

void PeerMonitor::beat_loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (int64_t count = 0; !stopping_; ++count) {
    try {
      store_->set("beat/" + std::to_string(rank_),
                  bytes(std::to_string(count) + " " + std::to_string(progress_.load())));
    } catch (const std::exception&) {
      return;  // the store is gone: the collectives will fail and diagnose() says so
    }
    stop_requested_.wait_for(lock, interval_, [this] { return stopping_; });
  }
}

void PeerMonitor::report_failure(const std::string& message) {
  std::lock_guard<std::mutex> lock(mutex_);
  try {
    store_->set("failure/" + std::to_string(rank_), bytes(message.substr(0, 2000)));
  } catch (const std::exception&) {
    // Best effort: the failure itself is reported by the failing rank's own exit.
  }
}

std::string PeerMonitor::diagnose(int64_t sequence) {
  std::map<int64_t, std::string> failures;
  auto read_beats = [&] {
    std::map<int64_t, Beat> beats;
    for (int64_t r = 0; r < world_size_; ++r) {
      if (r == rank_) continue;
      const std::string failure_key = "failure/" + std::to_string(r);
      if (store_->check({failure_key})) failures[r] = text(store_->get(failure_key));
      const std::string beat_key = "beat/" + std::to_string(r);
      if (!store_->check({beat_key})) continue;
      std::istringstream in(text(store_->get(beat_key)));
      in >> beats[r].count >> beats[r].progress;
    }
    return beats;
  };
  std::map<int64_t, Beat> before, after;
  try {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      before = read_beats();
    }
    if (failures.empty()) {
      // No rank said why: watch the heartbeats for a while to tell dead peers from stalled ones
      // (without holding the lock: this rank's own heartbeat must go on meanwhile).
      std::this_thread::sleep_for(interval_ * 4);
      std::lock_guard<std::mutex> lock(mutex_);
      after = read_beats();
    }
  } catch (const std::exception&) {
    return "The rendezvous store (hosted by " + store_host_ + ") no longer answers: that process has ended (it "
           "failed first, or stopped because of this same failure)";
  }
  std::ostringstream out;
  if (!failures.empty()) {
    for (const auto& [r, message] : failures) out << "Rank " << r << " failed first: " << message << ". ";
    return out.str().substr(0, out.str().size() - 1);
  }
  const auto window_ms = (interval_ * 4).count();
  for (int64_t r = 0; r < world_size_; ++r) {
    if (r == rank_) continue;
    const Beat a = before.count(r) ? before[r] : Beat{};
    const Beat b = after.count(r) ? after[r] : Beat{};
    if (b.count == a.count) {
      out << "Rank " << r << " sent no heartbeat for " << window_ms << " ms: its process died or is frozen. ";
    } else if (sequence >= 0 && b.progress < sequence) {
      out << "Rank " << r << " is alive but has started only " << b.progress << " collective(s), not #" << sequence
          << ": it is stalled in other work or took another code path. ";
    }
  }
  const std::string sentence = out.str();
  return sentence.empty() ? sentence : sentence.substr(0, sentence.size() - 1);
}

}  // namespace volt
