#include "trainer/precision/precision.h"

#include "trainer/error.h"
#include "trainer/registry/option_spec.h"

namespace volt {

const std::vector<std::string>& precision_names() {
  static const std::vector<std::string> names{"32-true"};
  return names;
}

std::shared_ptr<Precision> make_precision(const std::string& name, const torch::Device& device) {
  if (name == "32-true" || name == "32") return std::make_shared<Precision>();
  std::string valid;
  for (const auto& n : precision_names()) valid += (valid.empty() ? "" : ", ") + n;
  const auto suggestion = closest_match(name, precision_names());
  throw ConfigurationError("--precision: unknown value '" + name + "'" +
                           (suggestion.empty() ? "" : "; did you mean '" + suggestion + "'?") +
                           " Valid: " + valid);
}

}  // namespace volt
