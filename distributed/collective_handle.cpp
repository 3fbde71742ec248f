#include "distributed/collective_handle.h"

#include "distributed/collective_handle_state.h"

namespace volt {

std::string failure_message(const CollectiveHandle::State& state, const std::string& cause) {
  const std::string here = state.what + " failed: " + cause;
  std::string diagnosis;
  if (state.diagnose) {
    try {
      diagnosis = state.diagnose();
    } catch (const std::exception&) {
      // Diagnosis is best effort; the failure itself is what must be reported.
    }
  }
  if (diagnosis.empty()) return here;
  // A peer that said why it failed is the cause: it comes first, and what this rank saw after it.
  if (diagnosis.rfind("Rank ", 0) == 0 && diagnosis.find(" failed first: ") != std::string::npos) {
    return diagnosis + (diagnosis.back() == '.' ? " " : ". ") + "Then here: " + here;
  }
  return here + ". " + diagnosis;
}

namespace {
std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }
}  // namespace

std::string cause_of(const std::exception& e) {
  if (const auto* c10_error = dynamic_cast<const c10::Error*>(&e))
    return first_line(c10_error->what_without_backtrace());
  return first_line(e.what());
}

DistributedError collective_failure(const CollectiveHandle::State& s, const std::exception& e) {
  const std::string cause = cause_of(e);
  // c10d: "Operation timed out!"; Gloo's event loop: "Timed out waiting ..."; Gloo's sync-mode
  // sockets (the inline path): "Read timeout ..." / "Write timeout ...".
  bool timed_out = false;
  for (const char* marker : {"timed out", "Timed out", "Read timeout", "Write timeout"}) {
    timed_out |= cause.find(marker) != std::string::npos;
  }
  return DistributedError(failure_message(
      s, timed_out
             ? "it did not complete within the timeout of " + std::to_string(s.timeout.count()) + " ms (" + cause +
                   "): a peer is stalled or took another code path; raise --timeout "
                   "if the work between collectives is legitimately that slow"
             : cause));
}

// Note [Waiting for NCCL without blocking the host] c10d's NCCL work given a timeout in wait()
// blocks the calling thread until the collective has finished on the device, polling it; without
// one, wait() only makes the current CUDA stream wait for the collective's stream, and the host
// runs on. Every DDP bucket, FSDP gather and reduce-scatter waits this way: with the timeout each
// such wait was a device synchronization, and the host could no longer queue the next kernels
// while the GPU worked (measured on an H200 in docs/benchmarks.md, "volt against PyTorch
// Lightning": DDP and FSDP on one rank cost 0.9 to 4 ms per step more than the Trainer without
// them). So NCCL work waits stream-ordered, as PyTorch's DistributedDataParallel does, and the
// timeout is enforced by the process group's watchdog, created with the communicator's timeout
// (make_process_group): a collective that does not finish in time aborts the NCCL communicators
// and ends the process with c10d's message, instead of volt's error naming the rank. A result
// read on the host (item(), a copy to the CPU, a staged tensor copied back) synchronizes the
// stream first, so it always sees the finished collective. Gloo's work completes on the host
// and keeps the timed wait.
namespace {

// Waits for a collective that completes on the host, within its timeout. With a hang check
// (Note [Diagnosing a hang]) the rank is marked blocked meanwhile, and the wait is cut into
// slices: the first as long as the check's interval (a collective that completes sooner never
// pays more than one wait), then short ones, after each of which a verdict of the monitor's ends
// it with the hang report.
void wait_on_host(CollectiveHandle::State& s) {
  if (!s.monitor) {
    try {
      // Work::wait throws "Operation timed out!" past the timeout, or the backend's error.
      s.work->wait(s.timeout);
    } catch (const std::exception& e) {
      throw collective_failure(s, e);
    }
    return;
  }
  using Clock = std::chrono::steady_clock;
  BlockedIn blocked(s.monitor, s.position);
  const auto deadline = Clock::now() + s.timeout;
  auto slice = std::min(s.monitor->hang_check().interval, s.timeout);
  for (;;) {
    try {
      s.work->wait(slice);
      return;
    } catch (const std::exception& e) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      // A failure of the collective itself, or the whole timeout spent: as without slices.
      if (s.work->isCompleted() || left.count() <= 0) throw collective_failure(s, e);
    }
    if (const auto verdict = s.monitor->hang_verdict(); !verdict.empty()) {
      throw DistributedError(s.what + " cannot complete: " + verdict);
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    slice = std::max(std::chrono::milliseconds(1), std::min(std::chrono::milliseconds(200), left));
  }
}

}  // namespace

torch::Tensor CollectiveHandle::wait() {
  if (!state_) return {};
  State& s = *state_;
  if (s.error) std::rethrow_exception(s.error);
  if (s.done) return s.result;
  try {
    if (s.work) {
      if (s.stream_ordered) {
        try {
          s.work->wait();
        } catch (const std::exception& e) {
          throw collective_failure(s, e);
        }
      } else {
        wait_on_host(s);
      }
      s.work.reset();
    }
    if (s.finish) {
      s.result = s.finish();
      s.finish = nullptr;
    }
    while (!s.steps.empty()) {
      s.result = s.steps.front().run(s.result);
      s.steps.pop_front();
    }
  } catch (...) {
    // The result is half-made; every later wait reports the same failure.
    s.error = std::current_exception();
    throw;
  }
  s.done = true;
  return s.result;
}

bool CollectiveHandle::is_completed() const {
  if (!state_ || state_->done || state_->error) return true;
  for (const auto& step : state_->steps) {
    if (step.starts_collective) return false;
  }
  return !state_->work || state_->work->isCompleted();
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
    state_->steps.push_back({std::move(continuation), false});
  }
  return CollectiveHandle(std::move(state_));
}

// Note [Chained collectives]
// then_collective's continuation runs inside wait(), on the waiting thread, and starts its
// collective there; never earlier, not even on a handle that is already complete, so that where
// the second collective lands in a rank's sequence depends only on when the handle is waited.
// c10d matches collectives by the order in which each rank issues them, so chains are matched
// correctly when every rank waits its handles in the same order (the Reducer waits buckets in
// bucket order, on the training thread, after every bucket's first collective was started) and
// no other thread issues collectives on the same communicator meanwhile. A chain that is never
// waited never starts its second collective: its peers then fail at the timeout. When a
// collective in a chain fails, wait() throws its DistributedError, naming the collective that
// started the chain too; the continuations after it do not run.
CollectiveHandle CollectiveHandle::then_collective(
    std::function<CollectiveHandle(const torch::Tensor&)> continuation) && {
  auto state = state_ ? std::move(state_) : std::make_shared<State>();
  state->done = false;  // a complete handle keeps its result: the continuation starts from it
  auto step = [continuation = std::move(continuation), origin = state->what](const torch::Tensor& result) {
    try {
      // An inline collective (Note [Inline all_reduce]) fails inside the continuation itself.
      return continuation(result).wait();
    } catch (const DistributedError& e) {
      if (origin.empty()) throw;
      throw DistributedError(std::string(e.what()) + " (started by a continuation of " + origin + ")");
    }
  };
  state->steps.push_back({std::move(step), true});
  return CollectiveHandle(std::move(state));
}

}  // namespace volt
