// The pipeline schedules (Note [Pipeline schedules]) and the stage split, as functions: each
// stage's order of forwards and backwards, the activations it holds (every micro-batch under
// GPipe, at most S - s under 1F1B), no order that deadlocks, the simulated bubble equal to
// (S - 1) / (M + S - 1) (interleaved: (S - 1) / (V·M + S - 1)), the sizes interleaving refuses,
// and a Sequential cut into contiguous stages balanced by parameter count.
#include <gtest/gtest.h>

#include "strategies/pipeline/pipeline_schedule.h"
#include "strategies/pipeline/stage_split.h"
#include "tests/support/test_support.h"

namespace volt::pipeline {
namespace {

using Kind = PipelineAction::Kind;

std::string spelled(const std::vector<PipelineAction>& actions) {
  std::string out;
  for (const auto& a : actions)
    out += (out.empty() ? "" : " ") + std::string(a.kind == Kind::Forward ? "F" : "B") + std::to_string(a.microbatch);
  return out;
}

// "F<micro-batch>.<chunk>" per action.
std::string spelled_with_chunks(const std::vector<PipelineAction>& actions) {
  std::string out;
  for (const auto& a : actions) {
    out += (out.empty() ? "" : " ") + std::string(a.kind == Kind::Forward ? "F" : "B") + std::to_string(a.microbatch) +
           "." + std::to_string(a.chunk);
  }
  return out;
}

TEST(PipelineSchedules, GPipeRunsEveryForwardThenEveryBackward) {
  EXPECT_EQ(spelled(stage_actions(PipelineSchedule::GPipe, 1, 4, 3)), "F0 F1 F2 B0 B1 B2");
  EXPECT_EQ(peak_microbatches_held(stage_actions(PipelineSchedule::GPipe, 0, 4, 8)), 8);
}

TEST(PipelineSchedules, OneFOneBWarmsUpThenAlternatesAndHoldsAtMostTheStagesAfterIt) {
  // 4 stages, 6 micro-batches: stage s warms up with 3 - s forwards.
  EXPECT_EQ(spelled(stage_actions(PipelineSchedule::OneFOneB, 0, 4, 6)), "F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5");
  EXPECT_EQ(spelled(stage_actions(PipelineSchedule::OneFOneB, 3, 4, 6)), "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5");
  EXPECT_EQ(spelled(stage_actions(PipelineSchedule::OneFOneB, 1, 4, 2)), "F0 F1 B0 B1") << "fewer micro-batches";
  for (int64_t s = 0; s < 4; ++s) {
    EXPECT_EQ(peak_microbatches_held(stage_actions(PipelineSchedule::OneFOneB, s, 4, 16)), 4 - s) << "stage " << s;
  }
}

TEST(PipelineSchedules, BothKeepEveryBackwardInMicrobatchOrderAndEveryActionOnce) {
  for (const auto schedule : {PipelineSchedule::GPipe, PipelineSchedule::OneFOneB}) {
    for (int64_t stages = 1; stages <= 5; ++stages) {
      for (int64_t m = 1; m <= 9; ++m) {
        for (int64_t s = 0; s < stages; ++s) {
          const auto actions = stage_actions(schedule, s, stages, m);
          ASSERT_EQ(static_cast<int64_t>(actions.size()), 2 * m);
          int64_t next_forward = 0, next_backward = 0;
          for (const auto& a : actions) {
            if (a.kind == Kind::Forward) {
              EXPECT_EQ(a.microbatch, next_forward++);
            } else {
              EXPECT_EQ(a.microbatch, next_backward++);
              EXPECT_LT(a.microbatch, next_forward) << "a backward before its forward";
            }
          }
        }
      }
    }
  }
}

TEST(PipelineSchedules, TheSimulatedBubbleIsTheFormulaAndNoOrderDeadlocks) {
  for (const auto schedule : {PipelineSchedule::GPipe, PipelineSchedule::OneFOneB}) {
    for (int64_t stages = 1; stages <= 6; ++stages) {
      for (int64_t m = 1; m <= 12; ++m) {
        const auto run = simulate_pipeline(schedule, stages, m, 1.0, 2.0);
        EXPECT_DOUBLE_EQ(run.makespan, 3.0 * static_cast<double>(m + stages - 1))
            << to_string(schedule) << ", S " << stages << ", M " << m;
        EXPECT_NEAR(run.bubble_fraction(), bubble_formula(stages, m), 1e-12)
            << to_string(schedule) << ", S " << stages << ", M " << m;
      }
    }
  }
  EXPECT_DOUBLE_EQ(bubble_formula(4, 8), 3.0 / 11.0);
}

// Megatron-LM's order on 2 ranks with 2 chunks each and 4 micro-batches: micro-batches two at a
// time through chunk 0, then chunk 1; rank 0 warms up with 2·(S - 1) + (V - 1)·S = 4 forwards,
// rank 1 with 2; the backwards take the chunks in reverse.
TEST(PipelineSchedules, InterleavedOneFOneBTakesTheMicrobatchesARankAtATimeThroughEveryChunk) {
  const auto interleaved = PipelineSchedule::Interleaved1F1B;
  EXPECT_EQ(spelled_with_chunks(stage_actions(interleaved, 0, 2, 4, 2)),
            "F0.0 F1.0 F0.1 F1.1 F2.0 B0.1 F3.0 B1.1 F2.1 B0.0 F3.1 B1.0 B2.1 B3.1 B2.0 B3.0");
  EXPECT_EQ(spelled_with_chunks(stage_actions(interleaved, 1, 2, 4, 2)),
            "F0.0 F1.0 F0.1 B0.1 F1.1 B1.1 F2.0 B0.0 F3.0 B1.0 F2.1 B2.1 F3.1 B3.1 B2.0 B3.0");
  for (int64_t stages = 2; stages <= 4; ++stages) {
    for (int64_t chunks = 2; chunks <= 3; ++chunks) {
      for (int64_t m = stages; m <= 3 * stages; m += stages) {
        const std::string what =
            "S " + std::to_string(stages) + ", V " + std::to_string(chunks) + ", M " + std::to_string(m);
        for (int64_t s = 0; s < stages; ++s) {
          const auto actions = stage_actions(interleaved, s, stages, m, chunks);
          ASSERT_EQ(static_cast<int64_t>(actions.size()), 2 * m * chunks) << what;
          // Each chunk's forwards and backwards in micro-batch order, every one once, a backward
          // after its forward: the gradients' sums in one process's order.
          std::vector<int64_t> next_forward(static_cast<size_t>(chunks)), next_backward(static_cast<size_t>(chunks));
          for (const auto& a : actions) {
            auto& next = a.kind == Kind::Forward ? next_forward : next_backward;
            EXPECT_EQ(a.microbatch, next[static_cast<size_t>(a.chunk)]++) << what << ", stage " << s;
            if (a.kind == Kind::Backward)
              EXPECT_LT(a.microbatch, next_forward[static_cast<size_t>(a.chunk)]) << what << ", stage " << s;
          }
        }
        // No order deadlocks, and the bubble is V times smaller: idle (S - 1)(f + b) / V.
        const auto run = simulate_pipeline(interleaved, stages, m, 1.0, 2.0, chunks);
        EXPECT_NEAR(run.bubble_fraction(), bubble_formula(stages, m, chunks), 1e-12) << what;
        EXPECT_LT(bubble_formula(stages, m, chunks), bubble_formula(stages, m)) << what;
      }
    }
  }
  EXPECT_DOUBLE_EQ(bubble_formula(4, 8, 2), 3.0 / 19.0);
}

TEST(PipelineSchedules, InterleavingRefusesSizesItCannotRun) {
  using testing::configuration_error_of;
  const auto interleaved = PipelineSchedule::Interleaved1F1B;
  EXPECT_NE(configuration_error_of([&] { stage_actions(interleaved, 0, 2, 3, 2); })
                .find("microbatches=3 is no multiple of stages=2; choose a multiple"),
            std::string::npos);
  EXPECT_NE(configuration_error_of([&] { stage_actions(interleaved, 0, 2, 4, 1); })
                .find("give each rank at least 2 chunks (virtual_stages=2), or use schedule=1f1b"),
            std::string::npos);
  EXPECT_NE(configuration_error_of([&] { stage_actions(interleaved, 0, 1, 4, 2); })
                .find("on one stage has nothing to interleave"),
            std::string::npos);
  EXPECT_NE(configuration_error_of([&] { stage_actions(PipelineSchedule::OneFOneB, 0, 2, 4, 2); })
                .find("virtual_stages=2 with schedule=1f1b, which runs one chunk a rank"),
            std::string::npos);
}

TEST(PipelineSchedules, ScheduleNamesAreParsedAndOthersRefused) {
  EXPECT_EQ(parse_pipeline_schedule("gpipe"), PipelineSchedule::GPipe);
  EXPECT_EQ(parse_pipeline_schedule("1f1b"), PipelineSchedule::OneFOneB);
  EXPECT_EQ(parse_pipeline_schedule("interleaved_1f1b"), PipelineSchedule::Interleaved1F1B);
  const auto message = testing::configuration_error_of([] { parse_pipeline_schedule("interleaved"); });
  EXPECT_NE(message.find("schedule=interleaved is not a schedule; use gpipe, 1f1b or interleaved_1f1b"),
            std::string::npos)
      << message;
}

TEST(StageSplit, BalancedByParameterCountWithEveryStageNonEmpty) {
  // Linear, Tanh, Linear, Tanh, Linear as parameter counts: 40 | 81 either side of the first
  // Tanh, the earlier cut taken.
  EXPECT_EQ(balanced_stage_starts({40, 0, 72, 0, 9}, 2), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(balanced_stage_starts({40, 0, 72, 0, 9}, 3), (std::vector<int64_t>{0, 1, 3}));
  EXPECT_EQ(balanced_stage_starts({10, 10, 10, 10}, 4), (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(balanced_stage_starts({1, 1, 1, 100}, 2), (std::vector<int64_t>{0, 3}));
  EXPECT_EQ(balanced_stage_starts({0, 0, 0}, 3), (std::vector<int64_t>{0, 1, 2})) << "no parameters: one entry each";
  const auto message = testing::configuration_error_of([] { balanced_stage_starts({1, 2}, 3); });
  EXPECT_NE(message.find("stages=3 but the Sequential has 2 entries; use at most 2 stages"), std::string::npos)
      << message;
}

TEST(StageSplit, AStageIsTheSequentialsOwnModulesAndBadSplitsAreRefused) {
  torch::nn::Sequential model(torch::nn::Linear(4, 8), torch::nn::Tanh(), torch::nn::Linear(8, 1));
  EXPECT_EQ(entry_parameter_counts(model), (std::vector<int64_t>{40, 0, 9}));
  auto second = stage_of(model, {0, 2}, 1);
  ASSERT_EQ(second->size(), 1u);
  EXPECT_EQ(second->named_parameters()["2.weight"].data_ptr(), model->named_parameters()["2.weight"].data_ptr())
      << "shared, under the model's own name";
  for (const auto& [starts, expected] : std::vector<std::pair<std::vector<int64_t>, std::string>>{
           {{1, 2}, "the first stage starts at entry 0"},
           {{0, 2, 2}, "stage 2 starts at entry 2, after stage 1's start 2"},
           {{0, 3}, "before the Sequential's end (3 entries)"}}) {
    const auto message = testing::configuration_error_of([&] { stage_of(model, starts, 0); });
    EXPECT_NE(message.find(expected), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace volt::pipeline
