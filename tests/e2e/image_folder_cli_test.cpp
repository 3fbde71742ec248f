// The image example end to end, as a user runs it (docs/data.md): its setup step writes
// Fashion-MNIST as JPEG files, the example decodes and augments them every epoch on worker
// threads and learns, and the weights do not depend on the number of workers (the final test
// metrics printed with 0 and 3 workers are the same digits).
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>

#include "tests/support/test_support.h"

namespace volt::testing {
namespace {

std::string final_metrics(const std::string& output) {
  const auto at = output.find("Final test metrics:");
  return at == std::string::npos ? "" : output.substr(at, output.find('\n', at) - at);
}

TEST(ImageFolderCli, TheSetupStepsJpegsTrainTheCnnTheSameWithAnyNumberOfWorkers) {
  TemporaryDirectory dir;
  const auto made = run_command(built_binary("examples/make_image_folder") + " --limit 2000 --out " + dir.file("jpeg"), 300);
  ASSERT_EQ(made.exit_code, 0) << made.output;
  EXPECT_NE(made.output.find("2000 training and 2000 test images as JPEG files"), std::string::npos) << made.output;
  EXPECT_TRUE(std::filesystem::exists(dir.file("jpeg/train/ankle_boot")));

  std::string reference;
  for (const int workers : {0, 3}) {
    const auto run = run_command(built_binary("examples/image_folder") + " --data-dir " + dir.file("jpeg") +
                                     " --max-epochs 2 --batch-size 64 --num-workers " + std::to_string(workers) +
                                     " --enable-progress-bar false --enable-checkpointing false --logger none" +
                                     " --default-root-dir " + dir.file("run" + std::to_string(workers)) + " 2>&1",
                                 300);
    ASSERT_EQ(run.exit_code, 0) << run.output;
    const std::string metrics = final_metrics(run.output);
    std::smatch accuracy;
    ASSERT_TRUE(std::regex_search(metrics, accuracy, std::regex("test_acc=([0-9.]+)"))) << run.output;
    EXPECT_GT(std::stod(accuracy[1]), 0.6) << "2 epochs of 2000 images learn more than the 0.1 of chance";
    if (reference.empty()) {
      reference = metrics;
    } else {
      EXPECT_EQ(metrics, reference) << workers << " workers";
    }
  }
  // kill -9 while the workers decode: nothing is left behind (the workers are threads of the
  // process; no file, shared-memory segment of volt's or child process of their own; other tests
  // running meanwhile may add segments of their own to /dev/shm).
  const auto killed = run_command(
      "ls /dev/shm | grep volt > " + dir.file("shm_before") + "; " + built_binary("examples/image_folder") + " --data-dir " +
          dir.file("jpeg") + " --max-epochs 50 --batch-size 16 --num-workers 3 --enable-progress-bar false" +
          " --enable-checkpointing false --logger none --default-root-dir " + dir.file("run_killed") +
          " > /dev/null 2>&1 & pid=$!; sleep 2.5; kill -9 $pid; wait $pid; echo \"exit $?\"; sleep 0.2;" +
          " ls /dev/shm | grep volt > " + dir.file("shm_after") + "; diff " + dir.file("shm_before") + " " + dir.file("shm_after") +
          " && echo 'shm unchanged'; pgrep -x image_folder || echo 'no process left'",
      60);
  EXPECT_NE(killed.output.find("exit 137"), std::string::npos) << killed.output;
  EXPECT_NE(killed.output.find("shm unchanged"), std::string::npos) << killed.output;
  EXPECT_NE(killed.output.find("no process left"), std::string::npos) << killed.output;
  std::vector<std::string> left;
  if (std::filesystem::exists(dir.file("run_killed"))) {
    for (const auto& entry : std::filesystem::recursive_directory_iterator(dir.file("run_killed"))) {
      if (entry.is_regular_file()) left.push_back(entry.path().string());
    }
  }
  EXPECT_TRUE(left.empty()) << "files left by the killed run: " << left.front();

  // A folder without the split is a clear error.
  const auto missing = run_command(built_binary("examples/image_folder") + " --data-dir " + dir.file("nothing") +
                                       " --default-root-dir " + dir.file("run_missing") + " 2>&1",
                                   120);
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.output.find(dir.file("nothing") + "/train is not a directory"), std::string::npos) << missing.output;
}

}  // namespace
}  // namespace volt::testing
