#include "precision/precision_registry.h"

#include "core/error.h"
#include "precision/mixed_precision.h"
#include "precision/true_precision.h"

namespace volt {

bool float16_matmul_available(const torch::Device& device) {
  try {
    const auto a = torch::ones({2, 2}, torch::TensorOptions().dtype(torch::kHalf).device(device));
    torch::nn::functional::linear(a, a);
    return true;
  } catch (const c10::Error&) {
    return false;
  }
}

namespace {

void register_builtin_precisions(PrecisionRegistry& registry) {
  registry.add("32-true", "float32 everywhere", [](const torch::Device&) { return std::make_shared<Precision>(); });
  registry.add("64-true", "float64 parameters, buffers and inputs",
               [](const torch::Device&) { return std::make_shared<TruePrecision>(torch::kDouble); });
  registry.add("bf16-mixed", "float32 parameters, forward under bfloat16 autocast",
               [](const torch::Device& device) { return std::make_shared<MixedPrecision>(torch::kBFloat16, device); });
  registry.add("16-mixed", "float32 parameters, forward under float16 autocast, a GradScaler",
               [](const torch::Device& device) {
                 return std::make_shared<MixedPrecision>(torch::kHalf, device, std::make_shared<GradScaler>());
               });
  registry.add("bf16-true", "bfloat16 parameters, buffers and inputs",
               [](const torch::Device&) { return std::make_shared<TruePrecision>(torch::kBFloat16); });
  registry.add("16-true", "float16 parameters, buffers and inputs", [](const torch::Device& device) {
    check<NotSupportedError>(float16_matmul_available(device),
                             "--precision 16-true: this LibTorch cannot multiply float16 matrices on ", device.str(),
                             "; use --precision bf16-true (or bf16-mixed)");
    return std::make_shared<TruePrecision>(torch::kHalf);
  });
  registry.add_alias("32", "32-true", {}, "Lightning's short name");
  registry.add_alias("64", "64-true", {}, "Lightning's short name");
  registry.add_alias("16", "16-mixed", {}, "Lightning's short name");
  registry.add_alias("bf16", "bf16-mixed", {}, "Lightning's short name");
}

}  // namespace

PrecisionRegistry& precision_registry() {
  static PrecisionRegistry registry = [] {
    PrecisionRegistry r("precision", "--precision");
    register_builtin_precisions(r);
    return r;
  }();
  return registry;
}

const std::vector<std::string>& precision_names() { return precision_registry().canonical_names(); }

std::string canonical_precision_name(const std::string& name) { return precision_registry().canonical_name(name); }

std::shared_ptr<Precision> make_precision(const std::string& name, const torch::Device& device) {
  return precision_registry().create(name, device);
}

}  // namespace volt
