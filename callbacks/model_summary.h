#pragma once
#include <cstdint>
#include <string>

#include "callbacks/callback.h"
#include "core/option_schema.h"

namespace volt {

struct ModelSummaryOptions {
  int64_t max_depth = 1;  // depth of submodules to list; >= 1

  static const OptionSchema<ModelSummaryOptions>& schema();
  void validate() const { schema().validate(*this); }
};

// Prints, at fit start on global rank 0, a table of the module's submodules down to `max_depth`
// (name, type, parameter count) and totals: trainable, frozen, all, and their size in MB.
class ModelSummary : public Callback {
 public:
  CallbackRole role() const override { return CallbackRole::ModelSummary; }
  explicit ModelSummary(ModelSummaryOptions options);
  explicit ModelSummary(int64_t max_depth = 1);
  // The table is taken at setup, before the strategy prepares the module: a strategy that shards
  // parameters (fsdp) leaves released ones empty during the run, and the summary is of the model
  // as the user built it. Printed at fit start (rank 0).
  void setup(Trainer& trainer, Module& module, const std::string& stage) override;
  void on_fit_start(Trainer& trainer, Module& module) override;

  // The table itself (exposed for tests and for printing elsewhere).
  static std::string summarize(const torch::nn::Module& module, int64_t max_depth);

 private:
  int64_t max_depth_;
  std::string table_;  // taken at setup
};

}  // namespace volt
