#pragma once
// Note [Metrics read when asked]: what a step logs stays a tensor on its device until somebody
// needs the number: the progress bar when it refreshes, the loggers every log_every_n_steps, a
// callback or the user calling trainer.callback_metrics(). Reading a CUDA value on the host
// waits for the device; doing it every step would put the host back in lockstep with the GPU
// (the step at defaults would cost a synchronization, which is what Lightning's progress bar
// costs at refresh_rate 1). Every read happens inside a named scope (Note [Named scopes around
// the step]), so a test can tell these reads from a synchronization inside the step.
#include <torch/torch.h>

#include <map>
#include <string>

namespace volt {

// Name -> value, where a value is a 0-dim tensor not yet read or a number already read.
class MetricMap {
 public:
  void set(const std::string& name, const torch::Tensor& value);  // a 0-dim tensor on any device
  void set(const std::string& name, double value);
  // Every value as a number; the values still on a device are read now (inside the scope
  // "volt::read_metrics").
  const std::map<std::string, double>& values() const;

 private:
  mutable std::map<std::string, double> read_;
  mutable std::map<std::string, torch::Tensor> pending_;
};

// Reads each tensor of `values` on the host (inside the scope "volt::read_metrics").
std::map<std::string, double> read_metrics(const std::map<std::string, torch::Tensor>& values);

}  // namespace volt
