// TensorBoard event files, read back by an independent reader: Python's protobuf runtime with
// classes protoc generates from tests/loggers/tensorboard_subset.proto, and crcmod's CRC-32C.
#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>

#include "loggers/tensorboard/event_file_writer.h"
#include "loggers/tensorboard/proto_encoder.h"
#include "loggers/tensorboard_logger.h"
#include "tests/support/regression_problem.h"
#include "tests/support/test_support.h"

namespace volt::testing {
namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The reader's dump of `event_file`, one line per value; fails the test when the reader rejects it.
std::vector<std::string> read_events(const std::string& event_file) {
  const auto result = run_command("/usr/bin/python3 " + std::string(VOLT_SOURCE_DIR) +
                                      "/tests/loggers/tensorboard_reader.py " + VOLT_SOURCE_DIR +
                                      "/tests/loggers " + event_file,
                                  120);
  EXPECT_EQ(result.exit_code, 0) << result.output;
  return lines_of(result.output);
}

std::vector<std::string> event_files(const std::string& directory) {
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(directory)) {
    if (entry.path().filename().string().rfind("events.out.tfevents.", 0) == 0) files.push_back(entry.path());
  }
  return files;
}

TEST(ProtoEncoder, WritesProtobufWireFormat) {
  using tensorboard::ProtoEncoder;
  // Examples from the protobuf encoding guide: field 1 = 150 → 08 96 01; field 2 = "testing".
  EXPECT_EQ(ProtoEncoder().varint(1, 150).data(), std::string("\x08\x96\x01", 3));
  EXPECT_EQ(ProtoEncoder().bytes(2, "testing").data(), std::string("\x12\x07testing", 9));
  // A negative int64 takes ten bytes; defaults are omitted unless `always`.
  EXPECT_EQ(ProtoEncoder().int64(2, -1).data().size(), 11u);
  EXPECT_EQ(ProtoEncoder().varint(3, 0).data(), "");
  EXPECT_EQ(ProtoEncoder().float32(2, 0.0f, true).data(), std::string("\x15\0\0\0\0", 5));
  EXPECT_EQ(ProtoEncoder().float64(1, 1.5).data(), std::string("\x09\0\0\0\0\0\0\xf8\x3f", 9));
}

TEST(EventFileWriter, FramesRecordsWithMaskedCrc32c) {
  // An empty record: eight zero length bytes, then the masked CRCs of those bytes and of "".
  const std::string record = tensorboard::frame_record("");
  ASSERT_EQ(record.size(), 16u);
  EXPECT_EQ(record.substr(0, 8), std::string(8, '\0'));
  // masked_crc32c(crc32c("")) = 0xA282EAD8, little-endian.
  EXPECT_EQ(record.substr(12, 4), std::string("\xd8\xea\x82\xa2", 4));
}

TEST(TensorBoardLogger, ScalarsTextHistogramsAndHparamsReadBackIndependently) {
  TemporaryDirectory dir;
  TensorBoardLogger logger(dir.path(), "volt_logs", -1, /*histogram_every_n_epochs=*/0, /*histogram_bins=*/10);
  EXPECT_EQ(logger.log_dir(), dir.path() + "/volt_logs/version_0");
  logger.log_hyperparams({{"lr", 0.01}, {"layers", int64_t{3}}, {"optimizer", std::string("adam")}, {"amsgrad", true}});
  logger.log_metrics({{"train_loss", 0.5}, {"epoch", 0.0}}, 1);
  logger.log_metrics({{"train_loss", 0.25}, {"val_acc", 0.0}, {"epoch", 1.0}}, 2);
  logger.log_text("notes", "line one\nline two", 2);
  logger.log_histogram("weights", torch::arange(100, torch::kFloat), 2);
  logger.finalize(TrainerStatus::Finished);

  const auto files = event_files(logger.log_dir());
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(files[0], logger.event_file());
  const std::vector<std::string> expected{
      "file_version brain.Event:2",
      "hparam amsgrad bool True",
      "hparam layers number 3.0",
      "hparam lr number 0.01",
      "hparam optimizer string 'adam'",
      "scalar 1 train_loss 0.5",
      "scalar 2 train_loss 0.25",
      "scalar 2 val_acc 0.0",  // a zero scalar is still written (a oneof member)
      "text 2 notes/text_summary line one\\nline two",
      // 0..99 in 10 buckets: sum 4950, sum of squares 328350, every value counted once.
      "histogram 2 weights 0.0 99.0 100.0 4950.0 328350.0 10 100.0 99.0",
      "session_end STATUS_SUCCESS",
  };
  EXPECT_EQ(read_events(files[0]), expected);
  EXPECT_TRUE(std::filesystem::exists(logger.log_dir() + "/hparams.yaml"));
}

TEST(TensorBoardLogger, AnInterruptedRunEndsItsSessionAsFailed) {
  TemporaryDirectory dir;
  TensorBoardLogger logger(dir.path());
  logger.log_hyperparams({});
  logger.finalize(TrainerStatus::Interrupted);
  const auto dump = read_events(logger.event_file());
  ASSERT_FALSE(dump.empty());
  EXPECT_EQ(dump.back(), "session_end STATUS_FAILURE");
}

TEST(TensorBoardLogger, NonFiniteValuesAreLeftOutOfHistograms) {
  TemporaryDirectory dir;
  TensorBoardLogger logger(dir.path(), "tb", 0, 0, 4);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  logger.log_histogram("w", torch::tensor({1.0, nan, 3.0, std::numeric_limits<double>::infinity()}), 5);
  logger.log_histogram("all_nan", torch::tensor({nan}), 5);  // nothing to write
  logger.save();
  const std::vector<std::string> expected{"file_version brain.Event:2",
                                          "histogram 5 w 1.0 3.0 2.0 4.0 10.0 4 2.0 3.0"};
  EXPECT_EQ(read_events(logger.event_file()), expected);
}

TEST(TensorBoardLogger, FromTheCommandLineDuringFitWithWeightHistograms) {
  TemporaryDirectory dir;
  auto options = quiet_options(dir.path());
  options.max_epochs = 2;
  options.log_every_n_steps = 2;
  options.loggers = {"tensorboard:histogram_every_n_epochs=1,histogram_bins=5"};
  auto model = std::make_shared<RegressionModule>();
  model->save_hyperparameters({{"lr", 0.05}});
  Trainer trainer(options);
  trainer.fit(model, std::make_shared<RegressionData>(32, 8, false, 0, 16));

  const auto files = event_files(dir.path() + "/volt_logs/version_0");
  ASSERT_EQ(files.size(), 1u);
  const auto dump = read_events(files[0]);
  int train_loss = 0, val_loss = 0, histograms = 0;
  bool hparam = false, success = false;
  for (const auto& line : dump) {
    train_loss += line.rfind("scalar", 0) == 0 && line.find(" train_loss ") != std::string::npos;
    val_loss += line.rfind("scalar", 0) == 0 && line.find(" val_loss ") != std::string::npos;
    histograms += line.rfind("histogram", 0) == 0;
    hparam |= line == "hparam lr number 0.05";
    success |= line == "session_end STATUS_SUCCESS";
    EXPECT_EQ(line.find(" epoch "), std::string::npos) << "epoch is not a curve: " << line;
  }
  EXPECT_EQ(train_loss, 4) << "4 steps per epoch logged every 2 steps, 2 epochs";
  EXPECT_EQ(val_loss, 2);
  EXPECT_EQ(histograms, 2 * 2) << "linear.weight and linear.bias after each epoch";
  EXPECT_TRUE(hparam);
  EXPECT_TRUE(success);
  // The histogram of the final bias holds exactly its value.
  const double bias = model->linear->bias.item<double>();
  bool found_bias = false;
  for (const auto& line : dump) {
    if (line.rfind("histogram 8 linear.bias ", 0) != 0) continue;
    std::istringstream in(line.substr(std::string("histogram 8 linear.bias ").size()));
    double min = 0, max = 0, num = 0;
    in >> min >> max >> num;
    EXPECT_NEAR(min, bias, 1e-6);
    EXPECT_NEAR(max, bias, 1e-6);
    EXPECT_EQ(num, 1.0);
    found_bias = true;
  }
  EXPECT_TRUE(found_bias) << "no histogram of linear.bias at step 8";
}

}  // namespace
}  // namespace volt::testing
