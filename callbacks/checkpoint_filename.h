#pragma once
// ModelCheckpoint's file names: Lightning's templates such as "{epoch}-{step}-{val_acc:.3f}",
// which become "epoch=2-step=100-val_acc=0.912".
#include <cstdint>
#include <map>
#include <string>

namespace volt {

// Fills every "{name}" or "{name:spec}" of `pattern`: "epoch" and "step" from the arguments, any
// other name from `metrics` (0 when it was not logged, as Lightning does). With
// `auto_insert_metric_name` a field becomes "name=value". `spec` is Python's format mini-language
// subset [0][width][.precision][f|e|g|d]; without one an integer prints as digits and a float as
// Python's repr ("0.912", "1.0"). Throws ConfigurationError for an unclosed brace, an empty name
// or a spec outside the subset.
std::string format_checkpoint_name(const std::string& pattern, const std::map<std::string, double>& metrics,
                                   int64_t epoch, int64_t step, bool auto_insert_metric_name = true);

}  // namespace volt
