#include "callbacks/model_summary.h"

#include <iomanip>
#include <iostream>
#include <sstream>
#include <vector>

#include "core/error.h"
#include "trainer/trainer.h"
#include "core/cpu_threads.h"

namespace volt {
namespace {

struct Row {
  std::string name, type;
  int64_t params = 0;
};

int64_t count_params(const torch::nn::Module& module) {
  int64_t n = 0;
  for (const auto& p : module.parameters(/*recurse=*/true)) n += p.numel();
  return n;
}

void collect(const torch::nn::Module& module, const std::string& prefix, int64_t depth, int64_t max_depth,
             std::vector<Row>& rows) {
  if (depth > max_depth) return;
  for (const auto& child : module.named_children()) {
    const std::string name = prefix.empty() ? child.key() : prefix + "." + child.key();
    // "torch::nn::LinearImpl" reads as "Linear", as Lightning shows it.
    std::string type = child.value()->name();
    if (const auto colon = type.rfind("::"); colon != std::string::npos) type = type.substr(colon + 2);
    if (type.size() > 4 && type.compare(type.size() - 4, 4, "Impl") == 0) type.resize(type.size() - 4);
    rows.push_back({name, type, count_params(*child.value())});
    collect(*child.value(), name, depth + 1, max_depth, rows);
  }
}

std::string human(int64_t n) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(1);
  if (n >= 1000000) out << static_cast<double>(n) / 1e6 << " M";
  else if (n >= 1000) out << static_cast<double>(n) / 1e3 << " K";
  else out << n;
  return out.str();
}

}  // namespace

const OptionSchema<ModelSummaryOptions>& ModelSummaryOptions::schema() {
  static const auto schema = OptionSchema<ModelSummaryOptions>("ModelSummary")
                                 .option("max_depth", &ModelSummaryOptions::max_depth, "depth of submodules to list",
                                         at_least(1));
  return schema;
}

ModelSummary::ModelSummary(ModelSummaryOptions options) {
  options.validate();
  max_depth_ = options.max_depth;
}

ModelSummary::ModelSummary(int64_t max_depth) : ModelSummary(ModelSummaryOptions{.max_depth = max_depth}) {}

std::string ModelSummary::summarize(const torch::nn::Module& module, int64_t max_depth) {
  std::vector<Row> rows;
  collect(module, "", 1, max_depth, rows);
  size_t name_width = 4, type_width = 4;
  for (const auto& r : rows)
    name_width = std::max(name_width, r.name.size()), type_width = std::max(type_width, r.type.size());
  std::ostringstream out;
  out << "  | " << std::left << std::setw(static_cast<int>(name_width)) << "Name" << " | "
      << std::setw(static_cast<int>(type_width)) << "Type" << " | Params\n";
  out << std::string(name_width + type_width + 18, '-') << "\n";
  for (size_t i = 0; i < rows.size(); ++i) {
    out << std::right << std::setw(2) << i << std::left << "| " << std::setw(static_cast<int>(name_width))
        << rows[i].name << " | " << std::setw(static_cast<int>(type_width)) << rows[i].type << " | "
        << human(rows[i].params) << "\n";
  }
  int64_t trainable = 0, frozen = 0, bytes = 0;
  for (const auto& p : module.parameters(true)) {
    (p.requires_grad() ? trainable : frozen) += p.numel();
    bytes += p.numel() * static_cast<int64_t>(p.element_size());
  }
  out << std::string(name_width + type_width + 18, '-') << "\n";
  out << std::left << std::setw(10) << human(trainable) << "Trainable params\n"
      << std::setw(10) << human(frozen) << "Non-trainable params\n"
      << std::setw(10) << human(trainable + frozen) << "Total params\n"
      << std::setw(10) << std::fixed << std::setprecision(3) << static_cast<double>(bytes) / 1e6
      << "Total estimated model params size (MB)\n";
  return out.str();
}

void ModelSummary::setup(Trainer& trainer, Module& module, const std::string&) {
  if (trainer.fn() == TrainerFn::Fitting && trainer.is_global_zero()) table_ = summarize(module, max_depth_);
}

void ModelSummary::on_fit_start(Trainer& trainer, Module& module) {
  if (!trainer.is_global_zero()) return;
  if (table_.empty()) table_ = summarize(module, max_depth_);  // a callback added after setup
  // The threads the CPU computes with belong to the run's setup, like the parameter counts.
  std::cout << table_ << trainer.cpu_threads().describe() << "\n" << std::flush;
  table_.clear();
}

}  // namespace volt
