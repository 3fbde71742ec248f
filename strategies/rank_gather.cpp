#include "strategies/rank_gather.h"

#include "strategies/strategy_collectives.h"

namespace volt {

std::vector<torch::Tensor> gather_from_ranks(StrategyCollectives& strategy, const torch::Tensor& tensor) {
  const auto topology = strategy.topology();
  if (topology.world_size == 1) return {tensor};
  const auto bytes = tensor.detach().to(torch::kCPU).contiguous().reshape({-1}).view(torch::kUInt8);
  // Whole 4-byte words travel as int32 as they are; otherwise each byte widens to an int32.
  const bool words = bytes.numel() % 4 == 0;
  const auto mine = words ? bytes.view(torch::kInt32) : bytes.to(torch::kInt32);
  auto rows = torch::zeros({topology.world_size, mine.numel()}, torch::kInt32);
  rows[topology.global_rank].copy_(mine);
  rows = strategy.all_reduce(rows.to(strategy.root_device()), ReduceOp::Sum).to(torch::kCPU);
  std::vector<torch::Tensor> out;
  for (int64_t r = 0; r < topology.world_size; ++r) {
    const auto row = words ? rows[r].contiguous().view(torch::kUInt8) : rows[r].to(torch::kUInt8);
    out.push_back(row.view(tensor.scalar_type()).reshape(tensor.sizes()));
  }
  return out;
}

}  // namespace volt
