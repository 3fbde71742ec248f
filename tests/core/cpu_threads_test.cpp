// The CPU thread policy (core/cpu_threads.h): the core share to LibTorch's intra-op pool, one
// OpenBLAS thread inside it; --threads / --blas-threads and the environment win. CTest runs each
// case in its own process, so the environment and thread counts set here do not leak.
#include <gtest/gtest.h>

#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <thread>

#include "core/cpu_threads.h"
#include "tests/support/regression_problem.h"
#include "tests/support/test_support.h"

namespace volt {
namespace {

// OpenBLAS's own count, or -1 when the BLAS is another one.
int openblas_threads() {
  using Get = int (*)();
  auto get = reinterpret_cast<Get>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
  return get != nullptr ? get() : -1;
}

int64_t cores() { return std::max<int64_t>(1, std::thread::hardware_concurrency()); }

void clear_thread_environment() {
  unsetenv("OMP_NUM_THREADS");
  unsetenv("OPENBLAS_NUM_THREADS");
}

TEST(CPUThreads, TheCoreShareGoesToLibTorchAndOpenBlasRunsInsideItSingleThreaded) {
  clear_thread_environment();
  const auto one = configure_cpu_threads({.processes_per_node = 1});
  EXPECT_EQ(one.intra_op, cores());
  EXPECT_EQ(torch::get_num_threads(), cores());
  EXPECT_EQ(one.intra_op_source, "cores / processes");
  if (openblas_threads() < 0) GTEST_SKIP() << "the BLAS is not OpenBLAS";
  EXPECT_EQ(one.blas, 1);
  EXPECT_EQ(openblas_threads(), 1);
  EXPECT_NE(one.describe().find("1 OpenBLAS (one pool at a time)"), std::string::npos) << one.describe();

  const auto two = configure_cpu_threads({.processes_per_node = 2});
  EXPECT_EQ(two.intra_op, std::max<int64_t>(1, cores() / 2));
  EXPECT_EQ(torch::get_num_threads(), two.intra_op);
  const auto many = configure_cpu_threads({.processes_per_node = 4 * cores()});
  EXPECT_EQ(many.intra_op, 1) << "more processes than cores still get one thread each";
}

TEST(CPUThreads, FlagsWinOverTheEnvironmentAndTheRule) {
  clear_thread_environment();
  setenv("OMP_NUM_THREADS", "3", 1);
  const auto threads = configure_cpu_threads({.processes_per_node = 1, .threads = 2, .blas_threads = 2});
  EXPECT_EQ(threads.intra_op, 2);
  EXPECT_EQ(threads.intra_op_source, "--threads");
  EXPECT_EQ(torch::get_num_threads(), 2);
  if (openblas_threads() < 0) GTEST_SKIP() << "the BLAS is not OpenBLAS";
  EXPECT_EQ(threads.blas, 2);
  EXPECT_EQ(threads.blas_source, "--blas-threads");
  EXPECT_EQ(openblas_threads(), 2);
}

// LibTorch and OpenBLAS read OMP_NUM_THREADS and OPENBLAS_NUM_THREADS when they start, so this
// test runs again in a process started with them (the same test, told by VOLT_CPU_THREADS_CHILD),
// which prints the counts in effect after configure_cpu_threads. One intra-op thread: LibTorch
// 2.x caps OMP_NUM_THREADS at the cores, so a larger count would not show what volt left alone.
TEST(CPUThreads, TheEnvironmentIsLeftAsTheUserSetIt) {
  if (std::getenv("VOLT_CPU_THREADS_CHILD") != nullptr) {
    const auto threads = configure_cpu_threads({.processes_per_node = 1});
    std::cout << "THREADS intra_op=" << torch::get_num_threads() << " blas=" << openblas_threads()
              << " sources=" << threads.intra_op_source << "," << threads.blas_source << std::endl;
    return;
  }
  const auto child = testing::run_command(
      // Without GoogleTest's sharding variables, or a sharded run's child would run no test.
      "env -u GTEST_TOTAL_SHARDS -u GTEST_SHARD_INDEX OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=2 "
      "VOLT_CPU_THREADS_CHILD=1 " +
          std::filesystem::read_symlink("/proc/self/exe").string() +
          " --gtest_filter=CPUThreads.TheEnvironmentIsLeftAsTheUserSetIt",
      60);
  ASSERT_EQ(child.exit_code, 0) << child.output;
  EXPECT_NE(child.output.find("THREADS intra_op=1 "), std::string::npos) << child.output;
  EXPECT_NE(child.output.find("sources=OMP_NUM_THREADS,"), std::string::npos) << child.output;
  if (openblas_threads() < 0) GTEST_SKIP() << "the BLAS is not OpenBLAS";
  EXPECT_NE(child.output.find(" blas=2 sources=OMP_NUM_THREADS,OPENBLAS_NUM_THREADS"), std::string::npos)
      << child.output;
}

// The Trainer applies --threads / --blas-threads when a run starts.
TEST(CPUThreads, TheTrainerAppliesItsFlags) {
  clear_thread_environment();
  set_cpu_threads(cores(), cores());
  testing::TemporaryDirectory dir;
  auto options = testing::options_from_args({"--threads", "1", "--blas-threads", "2", "--max-epochs", "1",
                                             "--enable-progress-bar=false", "--enable-checkpointing=false",
                                             "--enable-model-summary=false", "--logger", "none",
                                             "--default-root-dir", dir.path()});
  Trainer trainer(options);
  trainer.fit(std::make_shared<testing::RegressionModule>(), std::make_shared<testing::RegressionData>(16, 8));
  EXPECT_EQ(torch::get_num_threads(), 1);
  if (openblas_threads() >= 0) {
    EXPECT_EQ(openblas_threads(), 2);
  }
}

}  // namespace
}  // namespace volt
