#include "precision/precision.h"

#include "core/error.h"
#include "precision/mixed_precision.h"
#include "precision/true_precision.h"
#include "core/option_spec.h"

namespace volt {
namespace {

// Whether `device` can multiply float16 matrices: LibTorch 1.13 has no CPU kernel for it, and a
// 16-true run should fail here with advice rather than in the first forward.
bool float16_matmul_available(const torch::Device& device) {
  try {
    const auto a = torch::ones({2, 2}, torch::TensorOptions().dtype(torch::kHalf).device(device));
    torch::nn::functional::linear(a, a);
    return true;
  } catch (const c10::Error&) {
    return false;
  }
}

}  // namespace

const std::vector<std::string>& precision_names() {
  static const std::vector<std::string> names{"32-true", "64-true", "bf16-mixed", "16-mixed", "bf16-true", "16-true"};
  return names;
}

std::string canonical_precision_name(const std::string& name) {
  static const std::map<std::string, std::string> aliases{
      {"32", "32-true"}, {"64", "64-true"}, {"16", "16-mixed"}, {"bf16", "bf16-mixed"}};
  if (auto alias = aliases.find(name); alias != aliases.end()) return alias->second;
  const auto& names = precision_names();
  if (std::find(names.begin(), names.end(), name) != names.end()) return name;
  std::string valid;
  for (const auto& n : names) valid += (valid.empty() ? "" : ", ") + n;
  const auto suggestion = closest_match(name, names);
  throw ConfigurationError("--precision: unknown value '" + name + "'" +
                           (suggestion.empty() ? "" : "; did you mean '" + suggestion + "'?") +
                           " Valid: " + valid + " (or the aliases 32, 64, 16, bf16)");
}

std::shared_ptr<Precision> make_precision(const std::string& name, const torch::Device& device) {
  const std::string canonical = canonical_precision_name(name);
  if (canonical == "32-true") return std::make_shared<Precision>();
  if (canonical == "64-true") return std::make_shared<TruePrecision>(torch::kDouble);
  if (canonical == "bf16-true") return std::make_shared<TruePrecision>(torch::kBFloat16);
  if (canonical == "bf16-mixed") return std::make_shared<MixedPrecision>(torch::kBFloat16, device);
  if (canonical == "16-mixed") {
    return std::make_shared<MixedPrecision>(torch::kHalf, device, std::make_shared<GradScaler>());
  }
  VOLT_INTERNAL_ASSERT(canonical == "16-true", "every canonical precision name is handled");
  check<NotSupportedError>(float16_matmul_available(device), "--precision 16-true: this LibTorch cannot "
                           "multiply float16 matrices on ", device.str(),
                           "; use --precision bf16-true (or bf16-mixed)");
  return std::make_shared<TruePrecision>(torch::kHalf);
}

}  // namespace volt
