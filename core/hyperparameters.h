#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <variant>

namespace volt {

// A run's hyperparameters: logged by every logger (hparams.yaml, TensorBoard's HParams tab) and
// stored in checkpoints. Ordered by name.
using HyperparameterValue = std::variant<bool, int64_t, double, std::string>;
using Hyperparameters = std::map<std::string, HyperparameterValue>;

std::string to_string(const HyperparameterValue& value);

}  // namespace volt
