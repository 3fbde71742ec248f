#include "distributed/process_launcher.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <fstream>
#include <iostream>
#include <iterator>
#include <mutex>
#include <thread>

#include "core/error.h"

extern char** environ;

namespace volt {
namespace {

// ---- what the signal handler may touch: lock-free atomics only (async-signal-safe)
constexpr int kMaxChildren = 1024;
std::atomic<pid_t> g_child_pids[kMaxChildren];  // 0: free slot or reaped
std::atomic<int> g_child_count{0};
std::atomic<int64_t> g_stop_grace_ms{5000};
std::atomic<bool> g_forwarding_signal{false};  // children ending now were stopped by us

void sleep_ms(long ms) {
  timespec t{ms / 1000, (ms % 1000) * 1000000};
  nanosleep(&t, nullptr);
}

// Forwards the signal to every child, reaps them (SIGKILL after the grace period), then ends this
// process by the same signal. Only async-signal-safe calls.
void forward_signal_and_exit(int signal_number) {
  g_forwarding_signal.store(true);
  const int count = g_child_count.load();
  for (int i = 0; i < count; ++i) {
    if (const pid_t pid = g_child_pids[i].load(); pid > 0) kill(pid, signal_number);
  }
  const int64_t grace = g_stop_grace_ms.load();
  for (int64_t waited = 0;; waited += 10) {
    bool running = false;
    for (int i = 0; i < count; ++i) {
      const pid_t pid = g_child_pids[i].load();
      if (pid <= 0) continue;
      int status = 0;
      const pid_t r = waitpid(pid, &status, WNOHANG);
      if (r == 0 && waited < grace) {
        running = true;
      } else if (r == 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        g_child_pids[i].store(0);
      } else {
        g_child_pids[i].store(0);
      }
    }
    if (!running) break;
    sleep_ms(10);
  }
  signal(signal_number, SIG_DFL);
  raise(signal_number);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// This program's arguments, exactly as it was started (NUL-separated in /proc/self/cmdline).
std::vector<std::string> own_arguments() {
  const std::string text = read_file("/proc/self/cmdline");
  std::vector<std::string> args;
  size_t start = 0;
  while (start < text.size()) {
    const size_t end = text.find('\0', start);
    args.push_back(text.substr(start, end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return args;
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int s = WTERMSIG(status);
    const char* name = strsignal(s);
    return "was killed by signal " + std::to_string(s) + (name ? std::string(" (") + name + ")" : "");
  }
  return "ended with wait status " + std::to_string(status);
}

bool status_failed(int status) { return !(WIFEXITED(status) && WEXITSTATUS(status) == 0); }

}  // namespace

std::map<std::string, std::string> child_environment(const LaunchOptions& options, int64_t local_rank) {
  std::map<std::string, std::string> env = options.extra_environment;
  env["VOLT_LAUNCHED"] = std::to_string(1);  // not = "1": GCC 12 warns falsely (-Wstringop-overflow)
  env["RANK"] = std::to_string(options.node_rank * options.local_world_size + local_rank);
  env["WORLD_SIZE"] = std::to_string(options.local_world_size * options.num_nodes);
  env["LOCAL_RANK"] = std::to_string(local_rank);
  env["LOCAL_WORLD_SIZE"] = std::to_string(options.local_world_size);
  env["NODE_RANK"] = std::to_string(options.node_rank);
  env["MASTER_ADDR"] = options.master_addr;
  env["MASTER_PORT"] = std::to_string(options.master_port);
  return env;
}

struct ProcessLauncher::State {
  struct Child {
    pid_t pid = 0;
    int64_t local_rank = 0;
    int64_t global_rank = 0;
    bool ended = false;
    int status = 0;
    int slot = 0;  // index in g_child_pids
  };

  LaunchOptions options;
  mutable std::mutex mutex;
  std::condition_variable changed;
  std::vector<Child> children;
  std::optional<std::string> failure;
  bool parent_stopping = false;  // stop_children() ran: later exits are ours, not failures
  bool parent_finished = false;  // the parent reached wait_for_children / stop_children
  bool shutting_down = false;
  std::thread watcher;

  bool all_ended() const {
    return std::all_of(children.begin(), children.end(), [](const Child& c) { return c.ended; });
  }

  std::string name(const Child& c) const {
    return "rank " + std::to_string(c.global_rank) + " (local rank " + std::to_string(c.local_rank) + ", pid " +
           std::to_string(c.pid) + ")";
  }

  void signal_running(int signal_number) {
    for (auto& c : children) {
      if (!c.ended) kill(c.pid, signal_number);
    }
  }

  // Reaps whatever ended; returns true when something changed. Caller holds the mutex.
  bool reap() {
    bool any = false;
    for (auto& c : children) {
      if (c.ended) continue;
      int status = 0;
      const pid_t r = waitpid(c.pid, &status, WNOHANG);
      if (r == 0) continue;
      c.ended = true;
      // r < 0: the signal handler reaped it while forwarding a signal; we are ending anyway.
      c.status = r == c.pid ? status : 0;
      g_child_pids[c.slot].store(0);
      any = true;
      if (r == c.pid && status_failed(status) && !parent_stopping && !g_forwarding_signal.load() && !failure) {
        failure = name(c) + " " + describe_status(status);
        std::cerr << "volt launcher: " << *failure << "; stopping the other ranks" << std::endl;
        signal_running(SIGTERM);
      }
    }
    return any;
  }

  void watch() {
    std::unique_lock<std::mutex> lock(mutex);
    std::optional<std::chrono::steady_clock::time_point> failed_at;
    bool killed_after_grace = false;
    // After a failure the watch goes on until the parent noticed (or was ended), even once every
    // child is gone: a parent busy outside collectives must not run on forever.
    while (!shutting_down && (!all_ended() || (failure && !parent_finished))) {
      if (reap()) changed.notify_all();
      const auto now = std::chrono::steady_clock::now();
      if (failure && !failed_at) failed_at = now;
      if (failed_at && !killed_after_grace && now - *failed_at > options.stop_grace) {
        signal_running(SIGKILL);
        killed_after_grace = true;
      }
      if (failed_at && !parent_finished && now - *failed_at > options.failure_grace) {
        std::cerr << "volt launcher: rank " << options.node_rank * options.local_world_size
                  << " did not stop within " << options.failure_grace.count() << " ms after " << *failure
                  << "; ending it" << std::endl;
        parent_finished = true;
        lock.unlock();
        kill(getpid(), SIGTERM);
        lock.lock();
      }
      changed.wait_for(lock, std::chrono::milliseconds(20));
    }
    changed.notify_all();
  }
};

void ProcessLauncher::launch(const LaunchOptions& options) {
  static std::atomic<bool> launched_in_this_process{false};
  check<ConfigurationError>(!launched_in_this_process.exchange(true), "launcher: this process already started its "
                            "local ranks; a program starts them once (give every Trainer run_main's launcher)");
  check<ConfigurationError>(options.local_world_size >= 1 && options.local_world_size < kMaxChildren,
                            "launcher: expected 1 to ", kMaxChildren - 1, " processes per node, got ",
                            options.local_world_size);
  state_ = new State();
  state_->options = options;
  g_stop_grace_ms = options.stop_grace.count();

  // Everything the child needs is built before fork(): after it, only async-signal-safe calls.
  char exe[4096] = {};
  const ssize_t length = readlink("/proc/self/exe", exe, sizeof exe - 1);
  check<DistributedError>(length > 0, "launcher: cannot find this program's executable (/proc/self/exe): ",
                          std::strerror(errno));
  const auto args = own_arguments();
  check<DistributedError>(!args.empty(), "launcher: cannot read this program's arguments (/proc/self/cmdline)");
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);

  struct sigaction action {};
  action.sa_handler = forward_signal_and_exit;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);

  const pid_t parent = getpid();
  std::unique_lock<std::mutex> lock(state_->mutex);
  for (int64_t local_rank = 1; local_rank < options.local_world_size; ++local_rank) {
    auto overrides = child_environment(options, local_rank);
    std::vector<std::string> env_strings;
    for (char** e = environ; e && *e; ++e) {
      const std::string entry(*e);
      if (!overrides.count(entry.substr(0, entry.find('=')))) env_strings.push_back(entry);
    }
    for (const auto& [key, value] : overrides) env_strings.push_back(key + "=" + value);
    std::vector<char*> envp;
    for (const auto& e : env_strings) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);

    const pid_t pid = fork();
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(1);  // the parent died before prctl took effect
      sigset_t none;
      sigemptyset(&none);
      sigprocmask(SIG_SETMASK, &none, nullptr);
      execve(exe, argv.data(), envp.data());
      const char message[] = "volt launcher: execve of the child failed\n";
      (void)!write(2, message, sizeof message - 1);
      _exit(127);
    }
    if (pid < 0) {
      const std::string cause = std::strerror(errno);
      lock.unlock();
      stop_children();
      throw DistributedError("launcher: cannot start local rank " + std::to_string(local_rank) + ": fork failed: " +
                             cause);
    }
    State::Child child;
    child.pid = pid;
    child.local_rank = local_rank;
    child.global_rank = options.node_rank * options.local_world_size + local_rank;
    child.slot = g_child_count.fetch_add(1);
    g_child_pids[child.slot].store(pid);
    state_->children.push_back(child);
  }
  lock.unlock();
  state_->watcher = std::thread([state = state_] { state->watch(); });
  // This process is local rank 0 of the group it just started: say so in its own environment, so
  // that a later Trainer in this program finds the same rendezvous as the children (which run
  // the same program) instead of starting another group.
  for (const auto& [key, value] : child_environment(options, 0)) setenv(key.c_str(), value.c_str(), 1);
}

bool ProcessLauncher::launched() const { return state_ != nullptr; }

std::chrono::milliseconds ProcessLauncher::finish_timeout() const {
  return state_ ? state_->options.finish_timeout : std::chrono::milliseconds(0);
}

std::optional<std::string> ProcessLauncher::failure() const {
  if (!state_) return std::nullopt;
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->failure;
}

std::optional<std::string> ProcessLauncher::wait_for_children(std::chrono::milliseconds timeout) {
  if (!state_) return std::nullopt;
  {
    std::unique_lock<std::mutex> lock(state_->mutex);
    state_->parent_finished = true;
    state_->changed.wait_for(lock, timeout, [&] { return state_->all_ended(); });
    if (!state_->all_ended() && !state_->failure) {
      for (const auto& c : state_->children) {
        if (!c.ended) {
          state_->failure =
              state_->name(c) + " did not end within " + std::to_string(timeout.count()) + " ms after rank " +
              std::to_string(state_->options.node_rank * state_->options.local_world_size) + " finished; stopped it";
          break;
        }
      }
    }
  }
  stop_children();
  return failure();
}

void ProcessLauncher::stop_children() {
  if (!state_) return;
  std::unique_lock<std::mutex> lock(state_->mutex);
  state_->parent_finished = true;
  if (!state_->all_ended()) {
    state_->parent_stopping = true;
    state_->signal_running(SIGTERM);
    if (!state_->changed.wait_for(lock, state_->options.stop_grace, [&] { return state_->all_ended(); })) {
      state_->signal_running(SIGKILL);
      state_->changed.wait(lock, [&] { return state_->all_ended(); });
    }
  }
  state_->shutting_down = true;
  state_->changed.notify_all();
  lock.unlock();
  if (state_->watcher.joinable() && state_->watcher.get_id() != std::this_thread::get_id()) state_->watcher.join();
}

ProcessLauncher::~ProcessLauncher() {
  if (!state_) return;
  if (std::uncaught_exceptions() > 0) {
    stop_children();
  } else {
    const bool reported = state_->parent_finished;
    const auto failed = wait_for_children(state_->options.finish_timeout);
    if (failed && !reported) std::cerr << "volt launcher: " << *failed << std::endl;
  }
  delete state_;
}

}  // namespace volt
