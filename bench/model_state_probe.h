#pragma once
// What the FSDP benchmarks (fsdp_memory, fsdp_layouts) count of a rank's model state, from live
// tensors and the strategy's counters: the parameters it keeps (the module's plus the
// optimizer's, distinct storages: FSDP's shards, and frozen parameters wherever they are), the
// most gathered at once (fsdp/peak_gathered_bytes), the gradients alive before the optimizer step
// and the Adam state. RankReporter prints them at the end of training.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "bench/ranked_runs.h"

namespace volt::bench {

inline std::vector<torch::Tensor> kept_parameters(volt::Module& module, torch::optim::Optimizer& optimizer) {
  auto tensors = module.parameters();
  for (auto& group : optimizer.param_groups()) {
    for (auto& p : group.params()) tensors.push_back(p);
  }
  return tensors;
}

// Counts what the table reports, on every rank; RankReporter prints it at the end of training.
class MemoryProbe : public RankReporter {
 public:
  using RankReporter::RankReporter;

  void on_before_optimizer_step(volt::Trainer&, volt::Module& module, torch::optim::Optimizer& optimizer) override {
    const auto kept = kept_parameters(module, optimizer);
    std::vector<torch::Tensor> grads;
    for (const auto& p : kept) grads.push_back(p.grad());
    grad_bytes_ = std::max(grad_bytes_, storage_bytes(grads));
    param_bytes_ = std::max(param_bytes_, storage_bytes(kept));
  }

  void on_train_batch_end(volt::Trainer& trainer, volt::Module& module, const torch::Tensor& loss,
                          const volt::Batch& batch, int64_t batch_idx) override {
    RankReporter::on_train_batch_end(trainer, module, loss, batch, batch_idx);
    const auto metrics = trainer.strategy().metrics();
    if (auto it = metrics.find("fsdp/peak_gathered_bytes"); it != metrics.end()) {
      gathered_bytes_ = std::max(gathered_bytes_, static_cast<int64_t>(it->second));
    }
    state_bytes_ = std::max(state_bytes_, adam_state_bytes(*trainer.optimizers().at(0)));
  }

 protected:
  std::vector<std::pair<std::string, int64_t>> memory(volt::Trainer&, volt::Module&) override {
    return {{"params", param_bytes_}, {"gathered", gathered_bytes_}, {"grads", grad_bytes_}, {"state", state_bytes_}};
  }

 private:
  int64_t param_bytes_ = 0, gathered_bytes_ = 0, grad_bytes_ = 0, state_bytes_ = 0;
};

// params + gathered + grads + state: the model state a rank holds at its peak.
inline double model_state(const RankReport& m) {
  return m.at("params") + m.at("gathered") + m.at("grads") + m.at("state");
}

}  // namespace volt::bench
