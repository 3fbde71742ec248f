#include "distributed/transports/shared_memory_group.h"

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <new>
#include <random>
#include <sstream>
#include <thread>

#include "core/error.h"
#include "distributed/transports/shared_memory_internal.h"
#include "distributed/transports/shared_segment.h"

namespace volt {

namespace {

const char* kind_name(int32_t kind) {
  switch (kind) {
    case kAllReduce: return "all_reduce";
    case kReduce: return "reduce";
    case kReduceScatter: return "reduce_scatter";
    case kAllGather: return "all_gather";
    case kBroadcast: return "broadcast";
    case kBarrier: return "barrier";
  }
  return "?";
}

void cpu_relax() {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#endif
}

// Whether process `pid` has ended: it does not exist, or it is a zombie (killed, not yet reaped by
// its parent: a launcher may wait for another rank first).
bool process_gone(pid_t pid) {
  if (::kill(pid, 0) != 0) return errno == ESRCH;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  std::getline(stat, text);
  const auto close = text.rfind(')');
  return close != std::string::npos && close + 2 < text.size() && (text[close + 2] == 'Z' || text[close + 2] == 'X');
}

// Where each rank's run starts in the concatenation of runs of `counts` elements, their total and
// the longest run.
struct Runs {
  std::vector<int64_t> displacement;
  int64_t total = 0, longest = 0;
};

Runs runs_of(const std::vector<int64_t>& counts) {
  Runs runs;
  for (const int64_t count : counts) {
    runs.displacement.push_back(runs.total);
    runs.total += count;
    runs.longest = std::max(runs.longest, count);
  }
  return runs;
}

std::string read_first_line(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

}  // namespace

struct alignas(64) SharedMemoryGroup::RankState {
  std::atomic<int64_t> counters[3];  // written, reduced, done: the last generation each finished
  std::atomic<int32_t> pid;
  std::atomic<int32_t> failed;  // 1: this rank failed and will not go on; 2: it left the group
  // What this rank's current collective is (its kind, numel, dtype, op and root), written
  // before its first chunk's "written": ranks that disagree fail instead of mixing two calls.
  std::atomic<int64_t> numel;
  std::atomic<int32_t> kind;
  std::atomic<int32_t> dtype;
  std::atomic<int32_t> op;
  std::atomic<int32_t> root;
  // An all_reduce in place: which of the group's buffer segments and where in it (-1: none).
  std::atomic<int64_t> buffers;
  std::atomic<int64_t> offset;
};

struct SharedMemoryGroup::Header {
  uint64_t kind;
  int64_t size;
  uint64_t slot_bytes;
};

std::string SharedMemoryGroup::host_id() {
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  return read_first_line("/proc/sys/kernel/random/boot_id") + "/" + name;
}

bool SharedMemoryGroup::moves(const torch::Tensor& tensor) {
  return tensor.defined() && tensor.device().is_cpu() && tensor.layout() == torch::kStrided;
}

bool SharedMemoryGroup::accepts(const torch::Tensor& tensor, ReduceOp op) {
  if (!tensor.defined() || !tensor.device().is_cpu() || tensor.layout() != torch::kStrided) return false;
  switch (tensor.scalar_type()) {
    case torch::kFloat:
    case torch::kDouble:
    case torch::kHalf:
    case torch::kBFloat16:
      return true;
    case torch::kInt:
    case torch::kLong:
      return op != ReduceOp::Mean;
    default:
      return false;
  }
}

std::unique_ptr<SharedMemoryGroup> SharedMemoryGroup::join(const Exchange& exchange, int64_t rank, int64_t size,
                                                           std::chrono::milliseconds timeout,
                                                           const std::string& describe, size_t slot_bytes,
                                                           std::string* why_not, const std::string& host) {
  const auto refuse = [&](const std::string& reason) -> std::unique_ptr<SharedMemoryGroup> {
    if (why_not) *why_not = reason;
    return nullptr;
  };
  const auto hosts = exchange(host.empty() ? host_id() : host);
  if (!std::all_of(hosts.begin(), hosts.end(), [&](const std::string& h) { return h == hosts[0]; })) {
    return refuse("the ranks are on more than one host");
  }
  slot_bytes = round_up(std::max<size_t>(slot_bytes, 4096), 4096);
  const size_t header_bytes = header_bytes_for(size);
  const size_t bytes = header_bytes + (static_cast<size_t>(size) + 1) * slot_bytes;
  std::string problem;
  auto segment = share_segment(
      exchange, rank, bytes,
      [&](char* at) {
        new (at) Header{kGroupSegment, size, slot_bytes};
        auto* states = at + round_up(sizeof(Header), 64);
        for (int64_t r = 0; r < size; ++r) new (states + static_cast<size_t>(r) * sizeof(RankState)) RankState{};
      },
      [&](const char* at) {
        const auto* header = reinterpret_cast<const Header*>(at);
        return header->kind == kGroupSegment && header->size == size && header->slot_bytes == slot_bytes;
      },
      problem);
  if (!segment) return refuse(problem);
  std::unique_ptr<SharedMemoryGroup> group(
      new SharedMemoryGroup(rank, size, timeout, describe, slot_bytes, std::move(segment)));
  group->state(rank).pid.store(static_cast<int32_t>(::getpid()));
  exchange(std::string());  // every pid is written before anyone waits on a peer
  return group;
}

size_t SharedMemoryGroup::header_bytes_for(int64_t size) {
  return round_up(kSegmentStampBytes + round_up(sizeof(Header), 64) + static_cast<size_t>(size) * sizeof(RankState),
                  4096);
}

SharedMemoryGroup::SharedMemoryGroup(int64_t rank, int64_t size, std::chrono::milliseconds timeout,
                                     std::string describe, size_t slot_bytes, std::unique_ptr<SharedSegment> segment)
    : rank_(rank),
      size_(size),
      timeout_(timeout),
      describe_(std::move(describe)),
      slot_bytes_(slot_bytes),
      segment_(std::move(segment)),
      header_bytes_(header_bytes_for(size)),
      registry_(std::make_shared<Registry>()) {}

SharedMemoryGroup::~SharedMemoryGroup() {
  // A peer still waiting for this rank fails at once rather than at its timeout (a rank whose
  // communicator is closed after an error, its process going on).
  state(rank_).failed.store(2);
}

SharedMemoryGroup::RankState& SharedMemoryGroup::state(int64_t rank) const {
  auto* states = segment_->base() + kSegmentStampBytes + round_up(sizeof(Header), 64);
  return *reinterpret_cast<RankState*>(states + static_cast<size_t>(rank) * sizeof(RankState));
}

char* SharedMemoryGroup::slot(int64_t rank) const {
  return segment_->base() + header_bytes_ + static_cast<size_t>(rank) * slot_bytes_;
}

char* SharedMemoryGroup::result() const { return slot(size_); }

void SharedMemoryGroup::abandon() {
  broken_ = true;
  state(rank_).failed.store(1);
}

void SharedMemoryGroup::fail(const std::string& message) {
  abandon();
  throw DistributedError(describe_ + ": " + message);
}

void SharedMemoryGroup::wait_for_all(int which, int64_t generation, const char* what) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  auto next_check = start + std::chrono::milliseconds(100);
  for (int64_t r = 0; r < size_; ++r) {
    RankState& peer = state(r);
    for (int64_t spins = 0; peer.counters[which].load(std::memory_order_acquire) < generation; ++spins) {
      if (spins < 2000) {
        cpu_relax();
        continue;
      }
      // Ranks may outnumber the cores: let the others run.
      if (spins < 4000) {
        sched_yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(20));
      }
      // A peer may arrive and then leave or exit while this one sleeps: what it wrote counts.
      if (peer.counters[which].load(std::memory_order_acquire) >= generation) break;
      if (const int32_t failed = peer.failed.load(); failed != 0) {
        fail(std::string(what) + " through shared memory: rank " + std::to_string(r) +
             (failed == 2 ? " left the group (its communicator was closed) before it"
                          : " failed during it; see that rank's error"));
      }
      const auto now = Clock::now();
      if (now >= next_check) {
        next_check = now + std::chrono::milliseconds(100);
        const pid_t pid = peer.pid.load();
        if (pid > 0 && process_gone(pid)) {
          fail(std::string(what) + " through shared memory: rank " + std::to_string(r) + " (pid " +
               std::to_string(pid) + ") is gone; it ended or was killed during the collective");
        }
        if (interruption_) {
          if (const auto reason = interruption_(); !reason.empty()) fail(std::string(what) + ": " + reason);
        }
        if (now - start >= timeout_) {
          fail(std::string(what) + " through shared memory: rank " + std::to_string(r) + " did not arrive within " +
               std::to_string(timeout_.count()) + " ms; it is stalled, or calls collectives in another order");
        }
      }
    }
  }
}

void SharedMemoryGroup::reduce_into(c10::ScalarType dtype, ReduceOp op, int64_t begin, int64_t count,
                                    char* destination, const std::function<char*(int64_t rank)>& source) {
  if (count <= 0) return;
  const auto element = static_cast<int64_t>(c10::elementSize(dtype));
  const auto options = torch::TensorOptions().dtype(dtype);
  const auto view = [&](char* base) { return torch::from_blob(base + begin * element, {count}, options); };
  auto out = torch::from_blob(destination, {count}, options);
  const bool sum = op == ReduceOp::Sum || op == ReduceOp::Mean;
  if (sum && (dtype == torch::kHalf || dtype == torch::kBFloat16)) {
    auto total = view(source(0)).to(torch::kFloat);
    for (int64_t r = 1; r < size_; ++r) total.add_(view(source(r)));
    if (op == ReduceOp::Mean) total.div_(static_cast<double>(size_));
    out.copy_(total);
    return;
  }
  // The first two slots straight into `out` (one pass fewer than copying slot 0 first), then the
  // others, in rank order.
  const auto combine = [&](const torch::Tensor& left, const torch::Tensor& right) {
    if (sum) {
      at::add_out(out, left, right);
    } else if (op == ReduceOp::Max) {
      at::maximum_out(out, left, right);
    } else {
      at::minimum_out(out, left, right);
    }
  };
  if (size_ == 1) {
    out.copy_(view(source(0)));
  } else {
    combine(view(source(0)), view(source(1)));
  }
  for (int64_t r = 2; r < size_; ++r) combine(out, view(source(r)));
  if (op == ReduceOp::Mean) out.div_(static_cast<double>(size_));
}

void SharedMemoryGroup::check_usable() const {
  check<DistributedError>(!broken_, describe_,
                          ": the shared-memory group failed earlier; it takes no more collectives");
}

int64_t SharedMemoryGroup::begin_chunk(bool first, int32_t kind, int64_t numel, int32_t dtype, int32_t op, int32_t root,
                                       int64_t buffers, int64_t offset, bool alternates) {
  const int64_t generation = ++generation_;
  // What this chunk writes is free: every rank is done with the chunk before (or, where chunks
  // take halves by turns, with the one before that, which used the same half).
  wait_for_all(2, generation - (alternates ? 2 : 1), kind_name(kind));
  if (first) describe_call(kind, numel, dtype, op, root, buffers, offset);
  return generation;
}

void SharedMemoryGroup::finish_step(int which, int64_t generation) {
  state(rank_).counters[which].store(generation, std::memory_order_release);
}

void SharedMemoryGroup::reduce_chunks(int32_t kind, int64_t root, const char* data, int64_t numel,
                                      c10::ScalarType dtype, ReduceOp op,
                                      const std::function<void(int64_t offset, int64_t n, const char* reduced)>& take) {
  torch::NoGradGuard no_grad;
  const auto element = static_cast<int64_t>(c10::elementSize(dtype));
  // Pipelined (Note [Collectives through shared memory]): chunks take the two halves of every slot
  // and of the result by turns, so that a rank may copy in its next chunk while others still copy
  // out this one.
  const auto half_bytes = static_cast<int64_t>(slot_bytes_ / 2 / 64 * 64);
  const int64_t chunk = half_bytes / element;
  int64_t index = 0;
  for (int64_t offset = 0; offset < numel || (numel == 0 && offset == 0); offset += chunk, ++index) {
    const int64_t n = std::min(chunk, numel - offset);
    const int64_t half = (index % 2) * half_bytes;
    const int64_t generation =
        begin_chunk(offset == 0, kind, numel, static_cast<int32_t>(dtype), static_cast<int32_t>(op),
                    static_cast<int32_t>(root), -1, -1, /*alternates=*/offset != 0);
    std::memcpy(slot(rank_) + half, data + offset * element, static_cast<size_t>(n * element));
    finish_step(0, generation);
    wait_for_all(0, generation, kind_name(kind));
    if (offset == 0) check_calls_agree(kind);
    const auto [begin, end] = slice_of(n, element);
    reduce_into(dtype, op, begin, end - begin, result() + half + begin * element,
                [&](int64_t r) { return slot(r) + half; });
    finish_step(1, generation);
    wait_for_all(1, generation, kind_name(kind));
    take(offset, n, result() + half);
    finish_step(2, generation);
    if (numel == 0) break;
  }
}

std::pair<int64_t, int64_t> SharedMemoryGroup::slice_of(int64_t n, int64_t element) const {
  // Slices of whole cache lines, so that no two ranks write one.
  const int64_t line = std::max<int64_t>(1, 64 / element);
  const int64_t even = (n + size_ - 1) / size_;
  const int64_t per = (even + line - 1) / line * line;
  const int64_t begin = std::min(n, rank_ * per);
  return {begin, std::min(n, begin + per)};
}

std::function<char*(int64_t)> SharedMemoryGroup::slots() const {
  return [this](int64_t r) { return slot(r); };
}

void SharedMemoryGroup::all_reduce(torch::Tensor& tensor, ReduceOp op) {
  check_usable();
  VOLT_INTERNAL_ASSERT(accepts(tensor, op) && tensor.is_contiguous(), "SharedMemoryGroup::all_reduce: accepts()");
  if (const auto [buffers, offset] = find_buffer(tensor); buffers != nullptr) {
    all_reduce_in_place(tensor, op, *buffers, offset);
    return;
  }
  const auto element = static_cast<int64_t>(tensor.element_size());
  auto* data = static_cast<char*>(tensor.data_ptr());
  reduce_chunks(kAllReduce, -1, data, tensor.numel(), tensor.scalar_type(), op,
                [&](int64_t offset, int64_t n, const char* reduced) {
                  std::memcpy(data + offset * element, reduced, static_cast<size_t>(n * element));
                });
}

void SharedMemoryGroup::reduce(torch::Tensor& tensor, int64_t root, ReduceOp op) {
  check_usable();
  VOLT_INTERNAL_ASSERT(accepts(tensor, op) && tensor.is_contiguous() && root >= 0 && root < size_,
                       "SharedMemoryGroup::reduce: accepts() and a rank");
  const auto element = static_cast<int64_t>(tensor.element_size());
  auto* data = static_cast<char*>(tensor.data_ptr());
  reduce_chunks(kReduce, root, data, tensor.numel(), tensor.scalar_type(), op,
                [&](int64_t offset, int64_t n, const char* reduced) {
                  if (rank_ == root) std::memcpy(data + offset * element, reduced, static_cast<size_t>(n * element));
                });
}

// Note [reduce_scatter through shared memory]
// Each rank computes only what it keeps, straight into its output: a step writes into every
// rank's slot one piece per destination rank (piece d: the next part of d's run, at most
// slot / size elements, at d's place in the slot), then each rank reduces its own piece over all
// slots into its output. So every rank reduces a share of each step (an all_reduce's split
// would leave all of one run to its owner while the others wait), and neither the result slot
// nor the step that copies out of it is needed: two synchronizations a step, not three.
void SharedMemoryGroup::reduce_scatter(const torch::Tensor& input, torch::Tensor& output,
                                       const std::vector<int64_t>& counts, ReduceOp op) {
  check_usable();
  VOLT_INTERNAL_ASSERT(accepts(input, op) && input.is_contiguous() && output.is_contiguous() &&
                           output.scalar_type() == input.scalar_type() &&
                           static_cast<int64_t>(counts.size()) == size_ &&
                           output.numel() == counts[static_cast<size_t>(rank_)],
                       "SharedMemoryGroup::reduce_scatter: a run per rank");
  torch::NoGradGuard no_grad;
  const auto dtype = input.scalar_type();
  const auto element = static_cast<int64_t>(input.element_size());
  // Pieces of whole cache lines, so that no two ranks write one.
  const int64_t line = std::max<int64_t>(1, 64 / element);
  const int64_t piece = std::max<int64_t>(line, static_cast<int64_t>(slot_bytes_) / element / size_ / line * line);
  const auto [displacement, total, longest] = runs_of(counts);
  const auto* in = static_cast<const char*>(input.data_ptr());
  auto* out = static_cast<char*>(output.data_ptr());
  for (int64_t offset = 0; offset < longest || (longest == 0 && offset == 0); offset += piece) {
    const auto part = [&](int64_t r) {
      return std::max<int64_t>(0, std::min(piece, counts[static_cast<size_t>(r)] - offset));
    };
    const int64_t generation = begin_chunk(offset == 0, kReduceScatter, total, static_cast<int32_t>(dtype),
                                           static_cast<int32_t>(op), -1);
    for (int64_t d = 0; d < size_; ++d) {
      std::memcpy(slot(rank_) + d * piece * element, in + (displacement[static_cast<size_t>(d)] + offset) * element,
                  static_cast<size_t>(part(d) * element));
    }
    finish_step(0, generation);
    wait_for_all(0, generation, "reduce_scatter");
    if (offset == 0) check_calls_agree(kReduceScatter);
    reduce_into(dtype, op, rank_ * piece, part(rank_), out + offset * element, slots());
    finish_step(1, generation);
    finish_step(2, generation);
    if (longest == 0) break;
  }
}

void SharedMemoryGroup::all_gather(const torch::Tensor& input, torch::Tensor& output,
                                   const std::vector<int64_t>& counts) {
  check_usable();
  VOLT_INTERNAL_ASSERT(moves(input) && input.is_contiguous() && output.is_contiguous() &&
                           output.scalar_type() == input.scalar_type() &&
                           static_cast<int64_t>(counts.size()) == size_ &&
                           input.numel() == counts[static_cast<size_t>(rank_)],
                       "SharedMemoryGroup::all_gather: a run per rank");
  const auto element = static_cast<int64_t>(input.element_size());
  const int64_t chunk = static_cast<int64_t>(slot_bytes_) / element;
  const auto [displacement, total, longest] = runs_of(counts);
  VOLT_INTERNAL_ASSERT(output.numel() == total, "SharedMemoryGroup::all_gather: an output of sum(counts)");
  const auto* in = static_cast<const char*>(input.data_ptr());
  auto* out = static_cast<char*>(output.data_ptr());
  const auto dtype = static_cast<int32_t>(input.scalar_type());
  for (int64_t offset = 0; offset < longest || (longest == 0 && offset == 0); offset += chunk) {
    const int64_t generation = begin_chunk(offset == 0, kAllGather, total, dtype, -1, -1);
    const auto part = [&](int64_t r) {
      return std::max<int64_t>(0, std::min(chunk, counts[static_cast<size_t>(r)] - offset));
    };
    std::memcpy(slot(rank_), in + offset * element, static_cast<size_t>(part(rank_) * element));
    finish_step(0, generation);
    wait_for_all(0, generation, "all_gather");
    if (offset == 0) check_calls_agree(kAllGather);
    for (int64_t r = 0; r < size_; ++r) {
      std::memcpy(out + (displacement[static_cast<size_t>(r)] + offset) * element, slot(r),
                  static_cast<size_t>(part(r) * element));
    }
    finish_step(1, generation);
    finish_step(2, generation);
    if (longest == 0) break;
  }
}

void SharedMemoryGroup::broadcast(torch::Tensor& tensor, int64_t root) {
  check_usable();
  VOLT_INTERNAL_ASSERT(moves(tensor) && tensor.is_contiguous() && root >= 0 && root < size_,
                       "SharedMemoryGroup::broadcast: a contiguous CPU tensor and a rank");
  const auto element = static_cast<int64_t>(tensor.element_size());
  const int64_t chunk = static_cast<int64_t>(slot_bytes_) / element;
  const int64_t numel = tensor.numel();
  auto* data = static_cast<char*>(tensor.data_ptr());
  for (int64_t offset = 0; offset < numel || (numel == 0 && offset == 0); offset += chunk) {
    const int64_t n = std::min(chunk, numel - offset);
    const int64_t generation = begin_chunk(offset == 0, kBroadcast, numel, static_cast<int32_t>(tensor.scalar_type()),
                                           -1, static_cast<int32_t>(root));
    if (rank_ == root) std::memcpy(slot(root), data + offset * element, static_cast<size_t>(n * element));
    finish_step(0, generation);
    wait_for_all(0, generation, "broadcast");
    if (offset == 0) check_calls_agree(kBroadcast);
    if (rank_ != root) std::memcpy(data + offset * element, slot(root), static_cast<size_t>(n * element));
    finish_step(1, generation);
    finish_step(2, generation);
    if (numel == 0) break;
  }
}

void SharedMemoryGroup::barrier() {
  check_usable();
  const int64_t generation = begin_chunk(true, kBarrier, -1, -1, -1, -1);
  finish_step(0, generation);
  wait_for_all(0, generation, "barrier");
  check_calls_agree(kBarrier);
  // "Done" only after the check: a rank may start its next call (and overwrite its description)
  // once every rank is done with this one, so no rank may still be reading the descriptions then.
  finish_step(1, generation);
  finish_step(2, generation);
}

void SharedMemoryGroup::describe_call(int32_t kind, int64_t numel, int32_t dtype, int32_t op, int32_t root,
                                      int64_t buffers, int64_t offset) {
  RankState& me = state(rank_);
  me.buffers.store(buffers, std::memory_order_relaxed);
  me.offset.store(offset, std::memory_order_relaxed);
  me.kind.store(kind, std::memory_order_relaxed);
  me.numel.store(numel, std::memory_order_relaxed);
  me.dtype.store(dtype, std::memory_order_relaxed);
  me.op.store(op, std::memory_order_relaxed);
  me.root.store(root, std::memory_order_relaxed);  // published by the "written" store that follows
}

void SharedMemoryGroup::check_calls_agree(int32_t kind) {
  const RankState& me = state(rank_);
  const auto call = [](const RankState& s) {
    const int32_t k = s.kind.load(std::memory_order_relaxed);
    if (k == kBarrier) return std::string("a barrier");
    std::string text = std::string(k == kAllReduce ? "an " : "a ") + kind_name(k) + " of " +
                       std::to_string(s.numel.load(std::memory_order_relaxed)) + " " +
                       c10::toString(static_cast<c10::ScalarType>(s.dtype.load(std::memory_order_relaxed))) +
                       " elements";
    const int32_t op = s.op.load(std::memory_order_relaxed), root = s.root.load(std::memory_order_relaxed);
    if (op >= 0) text += std::string(" (") + op_name(static_cast<ReduceOp>(op)) + ")";
    if (root >= 0) text += " (root " + std::to_string(root) + ")";
    if (const int64_t buffers = s.buffers.load(std::memory_order_relaxed); buffers >= 0) {
      text += " in place, in buffer segment " + std::to_string(buffers) + " at byte " +
              std::to_string(s.offset.load(std::memory_order_relaxed));
    }
    return text;
  };
  for (int64_t r = 0; r < size_; ++r) {
    const RankState& peer = state(r);
    if (peer.kind.load(std::memory_order_relaxed) != me.kind.load(std::memory_order_relaxed) ||
        peer.numel.load(std::memory_order_relaxed) != me.numel.load(std::memory_order_relaxed) ||
        peer.dtype.load(std::memory_order_relaxed) != me.dtype.load(std::memory_order_relaxed) ||
        peer.op.load(std::memory_order_relaxed) != me.op.load(std::memory_order_relaxed) ||
        peer.root.load(std::memory_order_relaxed) != me.root.load(std::memory_order_relaxed) ||
        peer.buffers.load(std::memory_order_relaxed) != me.buffers.load(std::memory_order_relaxed) ||
        peer.offset.load(std::memory_order_relaxed) != me.offset.load(std::memory_order_relaxed)) {
      fail(std::string(kind_name(kind)) + " through shared memory: rank " + std::to_string(r) + " called " +
           call(peer) + ", this rank " + call(me) +
           "; every rank must call the same collectives in the same order, with "
           "tensors of the same size and dtype (and, in place, at the same place of the same buffers)");
    }
  }
}

}  // namespace volt
