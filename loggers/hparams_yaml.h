#pragma once
// hparams.yaml, as Lightning's loggers write it: one "name: value" line per hyperparameter, in a
// form any YAML 1.1 reader (PyYAML) reads back to the same types and values.
#include <string>

#include "core/hyperparameters.h"

namespace volt {

// A value as a YAML scalar: bools true/false, integers as digits, floats always with a '.'
// (PyYAML reads "1e-05" as a string), .nan/.inf, and strings plain when unambiguous,
// double-quoted with escapes otherwise.
std::string yaml_scalar(const HyperparameterValue& value);

// Writes `hparams` to `path` (replacing it); "{}" when there are none. Throws
// ConfigurationError naming the path when it cannot be written.
void write_hparams_yaml(const std::string& path, const Hyperparameters& hparams);

}  // namespace volt
