// The policy of a captured step (Note [Capturing the step]) with a graph that records and
// replays on the CPU: eager warm-up, one capture, replays, another shape run eagerly with one
// warning, a host read in the warm-up that keeps the phase eager (named where it happened), a
// capture that fails; and StaticBatch, whose buffers keep their addresses.
#include <gtest/gtest.h>

#include "core/error.h"
#include "core/named_scope.h"
#include "core/in_step_hook_probe.h"
#include "run/graph/step_capture.h"

namespace volt::testing {
namespace {

// Stands in for a CUDA graph: capture runs the body's host code once with capturing = true
// (which the test bodies answer by recording their "device work" instead of doing it), and a
// replay does the recorded work.
class RecordingGraph : public CapturedGraph {
 public:
  RecordingGraph(std::function<void()>* tape, bool fail) : tape_(tape), fail_(fail) {}
  void capture(const std::function<void()>& body) override {
    if (fail_) throw NotSupportedError("operation not permitted when stream is capturing");
    body();
  }
  void replay() override { (*tape_)(); }

 private:
  std::function<void()>* tape_;
  bool fail_;
};

struct Counted {
  int64_t host_runs = 0;  // how often the body's host code ran
  int64_t total = 0;      // the "device" result: the sum of the values each call added
  std::function<void()> tape;
  int64_t graphs_made = 0;
  bool fail_capture = false;

  StepCapture make(int64_t warmup = 3) {
    return StepCapture({.warmup_steps = warmup}, [this] {
      ++graphs_made;
      return std::make_unique<RecordingGraph>(&tape, fail_capture);
    });
  }
  // A body that adds *value to the total, reading *value when it runs (a static input buffer).
  StepCapture::Body adding(const int64_t* value) {
    return [this, value](bool capturing) {
      ++host_runs;
      if (capturing) {
        tape = [this, value] { total += *value; };
      } else {
        total += *value;
      }
    };
  }
};

TEST(StepCapture, WarmsUpEagerlyThenCapturesOnceAndReplays) {
  Counted c;
  auto capture = c.make(3);
  int64_t input = 0;
  int64_t expected = 0;
  for (int64_t call = 1; call <= 10; ++call) {
    input = call;
    expected += call;
    const auto ran = capture.run("micro-step", "shape A", c.adding(&input));
    const auto want = call <= 3 ? StepCapture::Ran::Eagerly
                                : (call == 4 ? StepCapture::Ran::Captured : StepCapture::Ran::Replayed);
    EXPECT_EQ(ran, want) << "call " << call;
    EXPECT_EQ(c.total, expected) << "call " << call << ": every call's work is done exactly once";
  }
  EXPECT_EQ(c.host_runs, 4) << "host code runs at the 3 warm-up calls and at capture, never at a replay";
  EXPECT_EQ(c.graphs_made, 1);
  EXPECT_TRUE(capture.captured("micro-step"));
  EXPECT_FALSE(capture.eager_reason("micro-step").has_value());
}

TEST(StepCapture, AnotherShapeRunsEagerlyWithOneWarning) {
  Counted c;
  auto capture = c.make(1);
  int64_t input = 5;
  capture.run("micro-step", "shape A", c.adding(&input));  // warm-up
  capture.run("micro-step", "shape A", c.adding(&input));  // captured
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(capture.run("micro-step", "shape B", c.adding(&input)), StepCapture::Ran::Eagerly);
  EXPECT_EQ(capture.run("micro-step", "shape B", c.adding(&input)), StepCapture::Ran::Eagerly);
  EXPECT_EQ(capture.run("micro-step", "shape A", c.adding(&input)), StepCapture::Ran::Replayed);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(c.total, 25);
  EXPECT_EQ(c.graphs_made, 1) << "a phase keeps one graph";
  EXPECT_NE(err.find("captured for inputs shape A; a call with shape B runs eagerly"), std::string::npos) << err;
  EXPECT_EQ(err.find("volt: warning"), err.rfind("volt: warning")) << "said once: " << err;
}

TEST(StepCapture, PhasesAreCapturedApart) {
  Counted micro, optimizer;
  StepCapture capture({.warmup_steps = 1}, [&] {
    static int64_t made = 0;
    ++made;
    // Each phase's graph replays its own tape.
    return std::make_unique<RecordingGraph>(made % 2 == 1 ? &micro.tape : &optimizer.tape, false);
  });
  int64_t input = 1;
  for (int i = 0; i < 4; ++i) {
    capture.run("micro-step", "A", micro.adding(&input));
    capture.run("optimizer step", "all", optimizer.adding(&input));
  }
  EXPECT_EQ(micro.total, 4);
  EXPECT_EQ(optimizer.total, 4);
  EXPECT_TRUE(capture.captured("micro-step"));
  EXPECT_TRUE(capture.captured("optimizer step"));
}

TEST(StepCapture, AHostReadInTheWarmUpKeepsThePhaseEagerAndSaysWhere) {
  Counted c;
  auto capture = c.make(2);
  int64_t input = 1;
  const auto reading = [&](bool capturing) {
    NamedScope scope("volt::training_step");
    c.adding(&input)(capturing);
    (void)torch::ones({1}).sum().item<float>();  // what a training_step printing its loss does
  };
  ::testing::internal::CaptureStderr();
  for (int i = 0; i < 6; ++i) EXPECT_EQ(capture.run("micro-step", "A", reading), StepCapture::Ran::Eagerly);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(c.total, 6);
  EXPECT_EQ(c.graphs_made, 0) << "never captured";
  ASSERT_TRUE(capture.eager_reason("micro-step").has_value());
  EXPECT_NE(capture.eager_reason("micro-step")->find("volt::training_step"), std::string::npos)
      << *capture.eager_reason("micro-step");
  EXPECT_NE(err.find("--cuda-graph: the micro-step read a value on the host (in volt::training_step)"),
            std::string::npos)
      << err;
  EXPECT_EQ(err.find("volt: warning"), err.rfind("volt: warning")) << "said once: " << err;
}

// A hook with a default body that says it ran, as Callback's and Module's in-step hooks have.
struct Hooked {
  virtual ~Hooked() = default;
  virtual void on_after_backward() { InStepHookProbe::default_body_ran(); }
};
struct Overriding : Hooked {
  void on_after_backward() override { ++calls; }
  int64_t calls = 0;
};

TEST(StepCapture, AnOverriddenHookInsideThePhaseKeepsItEagerAndNamesIt) {
  for (const bool overridden : {false, true}) {
    Counted c;
    auto capture = c.make(2);
    int64_t input = 1;
    Hooked plain;
    Overriding custom;
    Hooked& hooks = overridden ? static_cast<Hooked&>(custom) : plain;
    const auto body = [&](bool capturing) {
      c.adding(&input)(capturing);
      probe_in_step_hook([] { return std::string("callback Grads"); }, "on_after_backward",
                         [&] { hooks.on_after_backward(); });
    };
    ::testing::internal::CaptureStderr();
    for (int i = 0; i < 5; ++i) capture.run("micro-step", "A", body);
    const std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_EQ(c.total, 5) << "overridden " << overridden;
    EXPECT_EQ(capture.captured("micro-step"), !overridden);
    if (overridden) {
      ASSERT_TRUE(capture.eager_reason("micro-step").has_value());
      EXPECT_NE(err.find("calls hooks that are overridden (callback Grads::on_after_backward)"), std::string::npos)
          << err;
      EXPECT_EQ(custom.calls, 5) << "eager: the hook runs at every step";
    } else {
      EXPECT_EQ(err, "") << "a default hook keeps nothing eager";
    }
  }
}

TEST(StepCapture, AFailedCaptureEndsTheRunNamingThePhaseAndTheCause) {
  Counted c;
  c.fail_capture = true;
  auto capture = c.make(1);
  int64_t input = 1;
  capture.run("optimizer step", "every optimizer", c.adding(&input));
  try {
    capture.run("optimizer step", "every optimizer", c.adding(&input));
    FAIL() << "a capture that fails must not pass silently";
  } catch (const NotSupportedError& error) {
    const std::string what = error.what();
    EXPECT_NE(what.find("--cuda-graph: the optimizer step for inputs every optimizer"), std::string::npos) << what;
    EXPECT_NE(what.find("operation not permitted when stream is capturing"), std::string::npos) << what;
  }
}

TEST(StepCapture, RefusesFewerThanOneWarmUpStep) {
  Counted c;
  EXPECT_THROW(c.make(0), ConfigurationError);
}

TEST(StaticBatch, KeepsItsBuffersPerShapeAndCopiesTheValuesIn) {
  StaticBatch buffers;
  Batch first{torch::arange(6, torch::kFloat).reshape({3, 2}), torch::tensor({1, 2, 3})};
  first.extras["mask"] = torch::ones({3}, torch::kBool);
  const Batch& a = buffers.copy_in(first);
  const void* input_address = a.input.data_ptr();
  EXPECT_TRUE(torch::equal(a.input, first.input));
  EXPECT_NE(a.input.data_ptr(), first.input.data_ptr()) << "a copy, not the loader's tensor";

  Batch second{first.input + 10, first.target + 10};
  second.extras["mask"] = torch::zeros({3}, torch::kBool);
  const Batch& b = buffers.copy_in(second);
  EXPECT_EQ(b.input.data_ptr(), input_address) << "the same shape reuses the same buffers";
  EXPECT_TRUE(torch::equal(b.input, second.input));
  EXPECT_TRUE(torch::equal(b.target, second.target));
  EXPECT_TRUE(torch::equal(b.extras.at("mask"), second.extras.at("mask")));

  const Batch partial{torch::zeros({1, 2}), torch::tensor({7})};
  EXPECT_NE(buffers.copy_in(partial).input.data_ptr(), input_address) << "another shape, other buffers";
  EXPECT_EQ(StaticBatch::signature(partial), "input Float[1, 2] cpu; target Long[1] cpu");
}

}  // namespace
}  // namespace volt::testing
