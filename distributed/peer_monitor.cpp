#include "distributed/peer_monitor.h"

#include <unistd.h>

#include <ctime>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <map>
#include <sstream>

namespace volt {
namespace {

std::vector<uint8_t> bytes(const std::string& text) { return {text.begin(), text.end()}; }

std::string text(const std::vector<uint8_t>& value) { return {value.begin(), value.end()}; }

// A rank's heartbeat as beat_loop publishes it: "<count> <progress>\n<position>".
struct Beat {
  int64_t count = -1;  // -1: no heartbeat published yet
  int64_t progress = -1;
  std::string position;  // RankPosition::serialize() of where it is blocked
};

Beat read_beat(c10d::Store& store, int64_t rank) {
  Beat beat;
  const std::string key = "beat/" + std::to_string(rank);
  if (!store.check({key})) return beat;
  const std::string value = text(store.get(key));
  const auto newline = value.find('\n');
  std::istringstream in(value.substr(0, newline));
  in >> beat.count >> beat.progress;
  beat.position = newline == std::string::npos ? "" : value.substr(newline + 1);
  return beat;
}

}  // namespace

PeerMonitor::PeerMonitor(c10::intrusive_ptr<c10d::Store> store, int64_t rank, int64_t world_size,
                         std::chrono::milliseconds interval, std::string store_host, HangCheckOptions hang_check)
    : store_(std::move(store)),
      rank_(rank),
      world_size_(world_size),
      interval_(interval),
      store_host_(std::move(store_host)),
      hang_check_(std::move(hang_check)) {
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
                  bytes(std::to_string(count) + " " + std::to_string(progress_.load()) + "\n" + published_position()));
      check_for_hang();
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
      const auto beat = read_beat(*store_, r);
      if (beat.count >= 0) beats[r] = beat;
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
    return "The rendezvous store (hosted by " + store_host_ +
           ") no longer answers: that process has ended (it "
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

// ---- Note [Diagnosing a hang]

namespace {
constexpr size_t kRingLength = 64;

std::string local_time(std::chrono::system_clock::time_point when) {
  const std::time_t seconds = std::chrono::system_clock::to_time_t(when);
  std::tm parts{};
  localtime_r(&seconds, &parts);
  const auto millis = std::chrono::duration_cast<std::chrono::milliseconds>(when.time_since_epoch()).count() % 1000;
  std::ostringstream out;
  out << std::put_time(&parts, "%H:%M:%S") << '.' << std::setw(3) << std::setfill('0') << millis;
  return out.str();
}
}  // namespace

void PeerMonitor::record(RankPosition position) {
  std::lock_guard<std::mutex> lock(positions_mutex_);
  ring_.emplace_back(std::chrono::system_clock::now(), std::move(position));
  if (ring_.size() > kRingLength) ring_.pop_front();
}

void PeerMonitor::enter_wait(RankPosition position) {
  std::lock_guard<std::mutex> lock(positions_mutex_);
  position.known = position.blocked = true;
  waits_.emplace_back(std::move(position), std::chrono::steady_clock::now());
}

void PeerMonitor::leave_wait() {
  std::lock_guard<std::mutex> lock(positions_mutex_);
  if (!waits_.empty()) waits_.pop_back();
}

std::string PeerMonitor::hang_verdict() const {
  std::lock_guard<std::mutex> lock(positions_mutex_);
  return verdict_;
}

std::string PeerMonitor::ring_text() const {
  std::lock_guard<std::mutex> lock(positions_mutex_);
  std::ostringstream out;
  out << "# rank " << rank_ << " of " << world_size_ << ": its last " << ring_.size()
      << " collectives, oldest first (Note [Diagnosing a hang])\n";
  for (const auto& [when, position] : ring_) {
    auto shown = position;
    shown.known = shown.blocked = true;
    out << local_time(when) << "  " << shown.describe() << "\n";
  }
  if (!waits_.empty()) out << "blocked in: " << waits_.back().first.describe() << "\n";
  return out.str();
}

std::string PeerMonitor::published_position() const {
  std::lock_guard<std::mutex> lock(positions_mutex_);
  return waits_.empty() ? RankPosition{}.serialize() : waits_.back().first.serialize();
}

void PeerMonitor::check_for_hang() {
  if (hang_check_.interval.count() <= 0) return;
  {
    std::lock_guard<std::mutex> lock(positions_mutex_);
    const bool waited =
        !waits_.empty() && std::chrono::steady_clock::now() - waits_.back().second >= hang_check_.interval;
    if (!waited || !verdict_.empty()) {
      if (waits_.empty()) previous_reading_.reset();
      return;
    }
  }
  // Every rank's beat count and position now; a rank without a beat yet reads as unknown.
  std::vector<std::pair<int64_t, std::string>> reading(static_cast<size_t>(world_size_), {-1, ""});
  for (int64_t r = 0; r < world_size_; ++r) {
    auto beat = read_beat(*store_, r);
    reading[static_cast<size_t>(r)] = {beat.count, std::move(beat.position)};
  }
  const auto previous = std::exchange(previous_reading_, reading);
  if (!previous || previous->size() != reading.size()) return;
  std::vector<RankPosition> positions;
  for (int64_t r = 0; r < world_size_; ++r) {
    const auto& [count, position] = reading[static_cast<size_t>(r)];
    const auto& [count_before, position_before] = (*previous)[static_cast<size_t>(r)];
    // Alive (its heartbeat went on) and still where it was: a frozen rank is not a hang.
    if (count < 0 || position != position_before || (r != rank_ && count <= count_before)) return;
    positions.push_back(RankPosition::parse(position));
  }
  const std::string report = explain_hang(positions, rank_);
  if (report.empty()) return;
  {
    // warn_only keeps waiting and finds the same hang every beat: it is reported (and the ring
    // written) once.
    std::lock_guard<std::mutex> lock(positions_mutex_);
    if (report == reported_) return;
    reported_ = report;
  }
  std::string where;
  if (!hang_check_.report_directory.empty()) {
    std::error_code ignored;
    const auto file =
        std::filesystem::path(hang_check_.report_directory) / ("collectives_rank" + std::to_string(rank_) + ".txt");
    std::filesystem::create_directories(file.parent_path(), ignored);
    std::ofstream out(file);
    out << ring_text();
    if (out) where = "; this rank's last collectives are in " + file.string();
  }
  const std::string full = "volt (rank " + std::to_string(rank_) + "): " + report + " (found after " +
                           std::to_string(hang_check_.interval.count()) + " ms blocked, --hang-check" + where + ")";
  const std::string line = full + (hang_check_.warn_only ? "; waiting on (--hang-check-action warn)\n" : "\n");
  [[maybe_unused]] const auto written = ::write(STDERR_FILENO, line.data(), line.size());
  std::lock_guard<std::mutex> lock(positions_mutex_);
  if (!hang_check_.warn_only) verdict_ = full;
}

}  // namespace volt
