#include "run/graph/capturable_run.h"

#include "core/error.h"
#include "strategies/strategy.h"
#include "run/graph/captured_graph.h"
#include "run/optim/fused_adamw.h"

namespace volt {
namespace {

FusedAdamW& fused(torch::optim::Optimizer& optimizer) {
  auto* adamw = dynamic_cast<FusedAdamW*>(&optimizer);
  VOLT_INTERNAL_ASSERT(adamw != nullptr, "check_supported admits FusedAdamW only");
  return *adamw;
}

}  // namespace

void CapturableRun::check_supported(const Strategy& strategy, bool automatic_optimization,
                                    const std::vector<std::shared_ptr<torch::optim::Optimizer>>& optimizers) {
  strategy.check_capturable();
  check<NotSupportedError>(automatic_optimization,
                           "--cuda-graph: manual optimization (automatic_optimization() false) steps from "
                           "training_step's own code, which a captured step runs once; use automatic optimization "
                           "or drop --cuda-graph");
  check<NotSupportedError>(!optimizers.empty(), "--cuda-graph: there is no optimizer to step");
  for (size_t i = 0; i < optimizers.size(); ++i) {
    check<NotSupportedError>(dynamic_cast<const FusedAdamW*>(optimizers[i].get()) != nullptr,
                             "--cuda-graph: optimizer ", i,
                             " is not a volt::FusedAdamW; a captured step needs an optimizer whose learning rate "
                             "and step count live on the device. Use volt::FusedAdamW, or drop --cuda-graph");
  }
  // The device last: every refusal above holds on any device, so a CPU run reports them too.
  const auto device = strategy.root_device();
  check<NotSupportedError>(device.is_cuda(), "--cuda-graph: a captured step runs on a CUDA device, and this run is on ",
                           device.str(), "; use --accelerator cuda on a machine with a GPU, or drop --cuda-graph");
  check<NotSupportedError>(cuda_graphs_compiled(),
                           "--cuda-graph: this build of volt has no CUDA; build against a LibTorch with CUDA");
  check<NotSupportedError>(FusedAdamW::fused_available(),
                           "--cuda-graph: this LibTorch has no fused AdamW kernel (2.4 or later has one)");
}

CapturableRun::CapturableRun(Strategy& strategy, bool automatic_optimization,
                             std::vector<std::shared_ptr<torch::optim::Optimizer>> optimizers)
    : strategy_(strategy), optimizers_(std::move(optimizers)) {
  check_supported(strategy_, automatic_optimization, optimizers_);
  for (auto& optimizer : optimizers_) fused(*optimizer).set_capturable(true);
  strategy_.precision().set_device_step([](torch::optim::Optimizer& optimizer, const torch::Tensor& found_inf) {
    fused(optimizer).step_unless(found_inf);
  });
  strategy_.gradients().zero_in_place(true);
}

CapturableRun::~CapturableRun() {
  strategy_.gradients().zero_in_place(false);
  strategy_.precision().set_device_step({});
  for (auto& optimizer : optimizers_) {
    try {
      fused(*optimizer).set_capturable(false);  // reads the device's step counts
    } catch (const std::exception&) {
      // The device failed (the run is ending with that error): the host counts stay as they were.
    }
  }
}

void CapturableRun::refresh_learning_rates() {
  for (auto& optimizer : optimizers_) fused(*optimizer).refresh_learning_rates();
}

std::vector<bool> CapturableRun::stepped() const {
  const auto found_inf = strategy_.precision().last_found_inf();
  const bool skipped = found_inf.defined() && found_inf.item<float>() != 0.0f;
  return std::vector<bool>(optimizers_.size(), !skipped);
}

}  // namespace volt
