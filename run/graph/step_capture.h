#pragma once
// When a step runs eagerly, when it is captured and when it is replayed: the policy of a captured
// step (--cuda-graph), shared by the Trainer (trainer/graph/captured_training.h) and the Fabric
// (Fabric::captured_step).
//
// Note [Capturing the step]: a step is made of phases (the Trainer's: the micro-step, which runs
// training_step and backward, and the optimizer step, which unscales, clips, steps, updates the
// loss scale and zeroes the gradients). Each phase
//   1. runs eagerly for its first `warmup_steps` calls, watched for values read on the host
//      (HostSyncObserver): the optimizers create their state, DDP settles its buckets, the
//      allocator its blocks, and a step that reads on the host is found before it is captured;
//   2. is then captured once, for the inputs' shape of that call, and replayed at once;
//   3. is replayed on every later call with the same shape.
// A call with another shape (the last, partial batch of an epoch; the last window of an epoch
// when accumulation does not divide it) runs eagerly, with one warning per phase: it is never
// captured, so a run keeps one graph per phase. A phase whose warm-up read a value on the host
// runs eagerly for the rest of the run, with one warning that names where the read happened; so
// does one whose warm-up called an overridden hook (Note [Hooks inside a captured phase]). A
// capture that fails for another reason (an operation CUDA graphs cannot hold) ends the run with
// NotSupportedError naming it: the host code of the failed capture has run, and running the step
// again eagerly could apply part of it twice.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "data/batch.h"
#include "run/graph/captured_graph.h"

namespace volt {

struct StepCaptureOptions {
  int64_t warmup_steps = 3;            // eager calls of each phase before it is captured; >= 1
  std::string flag = "--cuda-graph";   // how messages name the feature
};

class StepCapture {
 public:
  using GraphFactory = std::function<std::unique_ptr<CapturedGraph>()>;
  // The body of a phase; `capturing` is true on the call that records it (its host code runs
  // then and never again).
  using Body = std::function<void(bool capturing)>;
  enum class Ran { Eagerly, Captured, Replayed };

  StepCapture(StepCaptureOptions options, GraphFactory make_graph);

  // Runs phase `phase` for inputs of shape `key` (Note [Capturing the step]). Captured means
  // recorded and then replayed once: the step ran.
  Ran run(const std::string& phase, const std::string& key, const Body& body);

  // Why `phase` runs eagerly for good; nullopt while it may be (or is) captured.
  std::optional<std::string> eager_reason(const std::string& phase) const;
  // Whether `phase` holds a captured graph.
  bool captured(const std::string& phase) const;

 private:
  struct Phase {
    int64_t eager_calls = 0;
    std::string key;                       // of the captured graph
    std::unique_ptr<CapturedGraph> graph;
    std::optional<std::string> eager_reason;
    bool warned_other_shape = false;
  };
  Ran run_eagerly(Phase& phase, const std::string& name, const Body& body, bool watch);

  StepCaptureOptions options_;
  GraphFactory make_graph_;
  std::map<std::string, Phase> phases_;
};

// A batch's tensors copied into buffers that keep their addresses: what a captured step reads its
// inputs from. One set of buffers per signature.
class StaticBatch {
 public:
  // Each tensor's name, dtype, shape and device ("input Float[8, 512] cuda:0; target Long[8] cuda:0").
  static std::string signature(const Batch& batch);
  // The buffers for `batch`'s signature (allocated on the first sight of it), holding `batch`'s
  // values: copies queued on the current stream, read by whatever is queued after them.
  const Batch& copy_in(const Batch& batch);

 private:
  std::map<std::string, Batch> buffers_;
};

}  // namespace volt
