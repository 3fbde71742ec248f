#pragma once
// Which hooks inside a captured phase are overridden: what keeps a phase eager (Note [Hooks
// inside a captured phase]).
//
// Note [Hooks inside a captured phase]: a replay runs no C++, so a hook called inside a captured
// phase (on_before_backward, on_after_backward, on_before_optimizer_step, on_before_zero_grad,
// of a callback or of the module) would run at capture only: a callback that reads gradients there
// would silently stop seeing them. Their default bodies say that they ran
// (InStepHookProbe::default_body_ran); while a probe is alive on the thread (StepCapture's eager warm-up
// calls), every in-step hook is called through probe_in_step_hook, which notes the hooks whose
// default body did not run: overridden ones. A phase whose warm-up met one stays eager, with one
// warning that names it. An override that calls the base class's hook is taken for the default.
#include <string>
#include <utility>
#include <vector>

namespace volt {

class InStepHookProbe {
 public:
  // Active on the calling thread while alive (one at a time per thread).
  InStepHookProbe();
  ~InStepHookProbe();
  InStepHookProbe(const InStepHookProbe&) = delete;
  InStepHookProbe& operator=(const InStepHookProbe&) = delete;

  // "<who>::<hook>" of each overridden hook called while this probe was alive, in call order.
  const std::vector<std::string>& overridden() const { return overridden_; }

  // The probe alive on this thread; nullptr when none.
  static InStepHookProbe* active();
  // What the in-step hooks' default bodies call.
  static void default_body_ran();

  // Before and after one hook call (probe_in_step_hook).
  void arm() { default_ran_ = false; }
  bool default_ran() const { return default_ran_; }
  void note(std::string hook) { overridden_.push_back(std::move(hook)); }

 private:
  bool default_ran_ = false;
  std::vector<std::string> overridden_;
  InStepHookProbe* previous_ = nullptr;
};

// Calls `call`, one in-step hook named `hook` of the object `who()` names, and notes it when a
// probe is active and the hook is overridden. `who` is called only then.
template <typename Who, typename Call>
void probe_in_step_hook(const Who& who, const char* hook, Call&& call) {
  InStepHookProbe* probe = InStepHookProbe::active();
  if (probe == nullptr) {
    std::forward<Call>(call)();
    return;
  }
  probe->arm();
  std::forward<Call>(call)();
  if (!probe->default_ran()) probe->note(who() + "::" + hook);
}

}  // namespace volt
