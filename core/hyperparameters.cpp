#include "core/hyperparameters.h"

#include <sstream>

namespace volt {

std::string to_string(const HyperparameterValue& value) {
  return std::visit(
      [](const auto& v) -> std::string {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, bool>) {
          return v ? "true" : "false";
        } else if constexpr (std::is_same_v<T, std::string>) {
          return v;
        } else {
          std::ostringstream out;
          out << v;
          return out.str();
        }
      },
      value);
}

}  // namespace volt
