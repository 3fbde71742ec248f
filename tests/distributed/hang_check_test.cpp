// Note [Diagnosing a hang]: the verdict from the ranks' positions, and runs of two ranks whose
// collectives fall out of step (a save on rank 0 only, a barrier one rank skips, all_reduces of
// different sizes) under ddp and fsdp: every rank prints a report naming the collectives and the
// ranks in each, and the run ends non-zero within seconds of the hang, not at the timeout; a run
// whose ranks only wait for a slow one never reports.
#include <gtest/gtest.h>

#include <chrono>
#include <sstream>

#include "distributed/hang_check.h"
#include "tests/distributed/worker_runs.h"

namespace volt::testing {
namespace {

RankPosition blocked_in(std::string kind, int64_t sequence, int64_t bytes, std::string site = "",
                        std::string group = "0,1,2,3") {
  return {.known = true,
          .blocked = true,
          .group = std::move(group),
          .sequence = sequence,
          .kind = std::move(kind),
          .bytes = bytes,
          .dtype = "Float",
          .site = std::move(site)};
}

TEST(HangReport, NamesTheCollectivesAndTheRanksInEach) {
  std::vector<RankPosition> ranks{
      blocked_in("broadcast", 57, 8, "save_checkpoint"), blocked_in("all_reduce", 57, 4096, "ddp bucket 2 (backward)"),
      blocked_in("broadcast", 57, 8, "save_checkpoint"), blocked_in("broadcast", 57, 8, "save_checkpoint")};
  const auto report = explain_hang(ranks, 1);
  EXPECT_EQ(report,
            "hang: the ranks of group 0,1,2,3 are blocked in different collectives, so none can complete: ranks 0, 2 "
            "and 3 are in broadcast #57 of 8 bytes (Float) in group 0,1,2,3 (save_checkpoint) while rank 1 is in "
            "all_reduce #57 of 4096 bytes (Float) in group 0,1,2,3 (ddp bucket 2 (backward))");
  EXPECT_EQ(explain_hang(ranks, 0), report) << "every rank of the group reports the same";
  // The same collective of other sizes, or a rank one collective ahead, is out of step too.
  ranks = {blocked_in("all_reduce", 9, 16, "", "0,1"), blocked_in("all_reduce", 9, 32, "", "0,1")};
  EXPECT_NE(explain_hang(ranks, 0).find("rank 0 is in all_reduce #9 of 16 bytes"), std::string::npos);
  ranks[1] = blocked_in("all_reduce", 10, 16, "", "0,1");
  EXPECT_NE(explain_hang(ranks, 1).find("rank 1 is in all_reduce #10"), std::string::npos);
}

TEST(HangReport, NoVerdictWhileARankRunsOrEveryMemberIsInTheSameCollective) {
  std::vector<RankPosition> ranks{blocked_in("all_reduce", 3, 8, "", "0,1"), blocked_in("all_reduce", 3, 8, "", "0,1")};
  EXPECT_EQ(explain_hang(ranks, 0), "") << "both in it: slow, not out of step";
  ranks[1] = RankPosition::parse("running");
  EXPECT_TRUE(ranks[1].known);
  EXPECT_EQ(explain_hang(ranks, 0), "") << "a running rank may yet arrive";
  ranks[1] = RankPosition{};
  EXPECT_EQ(explain_hang(ranks, 0), "") << "a rank not heard from";
  // Another group's member elsewhere is not this group's business: ranks 2 and 3 agree.
  ranks = {blocked_in("all_reduce", 3, 8, "", "0,1"), blocked_in("broadcast", 4, 8, "", "0,1"),
           blocked_in("send", 1, 8, "", "2,3"), blocked_in("send", 1, 8, "", "2,3")};
  EXPECT_EQ(explain_hang(ranks, 2), "");
  EXPECT_NE(explain_hang(ranks, 0), "");
}

TEST(HangReport, APositionTravelsThroughItsLine) {
  const auto position = blocked_in("reduce_scatter", 12, 1 << 20, "fsdp gradients' reduce_scatter (backward)", "0,2");
  const auto back = RankPosition::parse(position.serialize());
  EXPECT_EQ(back.signature(), position.signature());
  EXPECT_EQ(back.describe(), position.describe());
  EXPECT_FALSE(RankPosition::parse("blocked\tgarbage").known);
}

struct HangRun {
  std::string output;
  int exit_code;
  double seconds;
};

HangRun run_hang(const std::string& flags) {
  TemporaryDirectory dir;
  const auto start = std::chrono::steady_clock::now();
  // train_command's, with a timeout of 90 s unless `flags` sets one.
  const std::string timeout = flags.find("--timeout") == std::string::npos ? " --timeout 90" : "";
  const auto result = run_command(built_binary("tests/distributed_worker") +
                                      " --mode train --seed 3 --max-epochs 2 --enable-progress-bar false"
                                      " --enable-model-summary false --enable-checkpointing false"
                                      " --num-sanity-val-steps 0 --log-every-n-steps 1 --batch-size 8 --devices 2" +
                                      timeout + " --default-root-dir " + dir.path() + " " + flags,
                                  180);
  return {result.output, result.exit_code,
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()};
}

// Each rank's report: the lines that start "volt (rank R): hang: " (the error a rank ends with
// quotes its report again, inside its line).
std::vector<std::string> reports(const std::string& output) {
  std::vector<std::string> found;
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("volt (rank ", 0) == 0 && line.find("): hang: ") != std::string::npos) found.push_back(line);
  }
  return found;
}

void expect_reported(const HangRun& run, const std::vector<std::string>& named, double within_seconds,
                     const std::string& what) {
  EXPECT_NE(run.exit_code, 0) << what << ":\n" << run.output;
  const auto lines = reports(run.output);
  for (const std::string rank : {"0", "1"}) {
    const auto mine = std::count_if(lines.begin(), lines.end(),
                                    [&](const std::string& l) { return l.rfind("volt (rank " + rank + ")", 0) == 0; });
    EXPECT_EQ(mine, 1) << what << ": rank " << rank << " prints one report:\n" << run.output;
  }
  for (const auto& line : lines) {
    for (const auto& name : named) EXPECT_NE(line.find(name), std::string::npos) << what << ": " << line;
  }
  EXPECT_LT(run.seconds, within_seconds) << what << ": far below the 90 s timeout\n" << run.output;
}

// Through Gloo's process group (--shared-memory-collectives false: through shared memory the ranks
// compare their calls as they pair up, below), at the default interval (5 s): the report within
// 10 s of the hang (the run's start, its two batches and its end add a few seconds on top).
TEST(HangCheck, ASaveOnRankZeroOnlyIsReportedOnEveryRankWithinSeconds) {
  const auto run = run_hang("--strategy ddp --inject-hang save_on_rank0 --shared-memory-collectives false");
  // Rank 1 went on to the stop decision after the batch.
  expect_reported(run,
                  {"rank 0 is in all_gather", "(save_checkpoint)", "rank 1 is in broadcast",
                   "(broadcast_decision at fit_loop.cpp:"},
                  25.0, "ddp");
}

TEST(HangCheck, ASkippedBarrierUnderFsdpAndSizesOverGloo) {
  expect_reported(run_hang("--strategy fsdp --inject-hang skip --hang-check 2 --shared-memory-collectives false"),
                  {"rank 0 is in barrier", "(a barrier of the worker's callback)", "rank 1 is in"}, 20.0, "fsdp skip");
  // The same all_reduce of 1 MiB on rank 0 and 1 MiB + 4 KiB on rank 1. LibTorch 2.x's Gloo checks
  // the sizes it receives itself and aborts both processes first, with its own message; 1.13's
  // waits, and the hang check reports it.
  const auto sizes = run_hang("--strategy ddp --inject-hang sizes --hang-check 2 --shared-memory-collectives false");
  if (sizes.output.find("Received data size doesn't match expected size") != std::string::npos) {
    EXPECT_NE(sizes.exit_code, 0) << sizes.output;
    EXPECT_LT(sizes.seconds, 20.0) << sizes.output;
  } else {
    expect_reported(sizes, {"all_reduce", "of 1048576 bytes", "of 1052672 bytes"}, 20.0, "ddp sizes");
  }
}

// Through shared memory the ranks' calls pair up there and are compared at once: the run fails at
// the first out-of-step collective, each rank naming both calls.
TEST(HangCheck, ThroughSharedMemoryCallsOutOfStepFailAtOnce) {
  const auto run = run_hang("--strategy ddp --inject-hang skip --hang-check 30");
  EXPECT_NE(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("rank 1 called a broadcast of 3 Long elements (root 0), this rank a barrier"),
            std::string::npos)
      << run.output;
  EXPECT_LT(run.seconds, 20.0) << run.output;
}

// With action warn the report is printed once and the ranks wait on, until the timeout.
TEST(HangCheck, WarnReportsAndWaitsForTheTimeout) {
  const auto run = run_hang(
      "--strategy ddp --inject-hang skip --hang-check 1 --hang-check-action warn --timeout 8 "
      "--shared-memory-collectives false");
  EXPECT_NE(run.exit_code, 0) << run.output;
  EXPECT_EQ(reports(run.output).size(), 2u) << run.output;
  EXPECT_NE(run.output.find("waiting on (--hang-check-action warn)"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("within the timeout of 8000 ms"), std::string::npos) << run.output;
}

// A rank 0.6 s slower at every batch keeps its peer waiting in its collectives 3 times the check's
// interval, for 16 batches: no report, and training ends as without the check.
TEST(HangCheck, ASlowRankIsNoHang) {
  const auto run = run_hang("--strategy ddp --slow-rank 0 --slow-ms 600 --hang-check 0.2");
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_TRUE(reports(run.output).empty()) << run.output;
  EXPECT_EQ(trained_lines(run.output).size(), 2u) << run.output;
}

TEST(HangCheck, AnIntervalPastTheTimeoutIsRefused) {
  const auto run = run_hang("--strategy ddp --hang-check 100 --timeout 60");
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_NE(run.output.find("--hang-check: expected an interval below --timeout (60 s), got 100 s"), std::string::npos)
      << run.output;
}

}  // namespace
}  // namespace volt::testing
