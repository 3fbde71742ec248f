// ModelCheckpoint's file-name templates, as Lightning formats them.
#include "callbacks/checkpoint_filename.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "core/float_format.h"

namespace volt {
namespace {

TEST(CheckpointFilename, FillsEpochStepAndMetricsWithTheirNames) {
  const std::map<std::string, double> metrics{{"val_acc", 0.91234}, {"val_loss", 0.5}};
  EXPECT_EQ(format_checkpoint_name("{epoch}-{step}-{val_acc:.3f}", metrics, 2, 100), "epoch=2-step=100-val_acc=0.912");
  EXPECT_EQ(format_checkpoint_name("{epoch}-{step}", metrics, 0, 4), "epoch=0-step=4");
  EXPECT_EQ(format_checkpoint_name("best-{epoch:03d}-{val_loss}", metrics, 7, 0), "best-epoch=007-val_loss=0.5");
  EXPECT_EQ(format_checkpoint_name("{val_acc:.2e}", metrics, 0, 0), "val_acc=9.12e-01");
  EXPECT_EQ(format_checkpoint_name("{epoch}_{val_acc:.1f}", metrics, 1, 0, /*auto_insert_metric_name=*/false), "1_0.9");
  EXPECT_EQ(format_checkpoint_name("model", metrics, 1, 2), "model");
  // A metric that was not logged (yet) reads 0, as in Lightning.
  EXPECT_EQ(format_checkpoint_name("{missing:.2f}", metrics, 0, 0), "missing=0.00");
}

TEST(CheckpointFilename, RejectsMalformedTemplates) {
  EXPECT_THROW(format_checkpoint_name("{epoch", {}, 0, 0), ConfigurationError);
  EXPECT_THROW(format_checkpoint_name("{}", {}, 0, 0), ConfigurationError);
  EXPECT_THROW(format_checkpoint_name("{val:>10s}", {}, 0, 0), ConfigurationError);
  EXPECT_THROW(format_checkpoint_name("{step:.2d}", {}, 0, 0), ConfigurationError);
}

TEST(PythonFloatRepr, MatchesPythonsRepr) {
  EXPECT_EQ(python_float_repr(0.1), "0.1");
  EXPECT_EQ(python_float_repr(1.0), "1.0");
  EXPECT_EQ(python_float_repr(-2.5), "-2.5");
  EXPECT_EQ(python_float_repr(1e-5), "1e-05");
  EXPECT_EQ(python_float_repr(0.0001), "0.0001");
  EXPECT_EQ(python_float_repr(1e16), "1e+16");
  EXPECT_EQ(python_float_repr(123456789012345.0), "123456789012345.0");
  EXPECT_EQ(python_float_repr(1.0 / 3), "0.3333333333333333");
  EXPECT_EQ(python_float_repr(NAN), "nan");
  EXPECT_EQ(python_float_repr(-INFINITY), "-inf");
}

}  // namespace
}  // namespace volt
