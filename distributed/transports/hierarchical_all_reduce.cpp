#include "distributed/transports/hierarchical_all_reduce.h"

#include <algorithm>

#include "core/error.h"
#include "distributed/transports/c10d_process_group.h"

namespace volt {

namespace {

// The hosts in order of their lowest rank, and each one's ranks in rank order.
std::vector<std::vector<int64_t>> ranks_by_host(const std::vector<std::string>& hosts) {
  std::vector<std::string> order;
  std::vector<std::vector<int64_t>> ranks;
  for (int64_t r = 0; r < static_cast<int64_t>(hosts.size()); ++r) {
    const auto found = std::find(order.begin(), order.end(), hosts[static_cast<size_t>(r)]);
    if (found == order.end()) {
      order.push_back(hosts[static_cast<size_t>(r)]);
      ranks.push_back({r});
    } else {
      ranks[static_cast<size_t>(found - order.begin())].push_back(r);
    }
  }
  return ranks;
}

// A Gloo group of `size` ranks over `store`, every rank connected (wait_until_connected).
c10::intrusive_ptr<compat::C10dBackend> connected_gloo_group(const c10::intrusive_ptr<c10d::Store>& store, int64_t rank,
                                                            int64_t size,
                                                            const std::shared_ptr<gloo::transport::Device>& device,
                                                            std::chrono::milliseconds timeout, C10dEntry& entry) {
  auto group = make_process_group("gloo", store, rank, size, device, timeout, torch::kCPU);
  wait_until_connected(*group, entry, timeout);
  return group;
}

}  // namespace

bool HierarchicalAllReduce::applies(const std::vector<std::string>& hosts) {
  const auto by_host = ranks_by_host(hosts);
  return by_host.size() > 1 && std::any_of(by_host.begin(), by_host.end(),
                                           [](const std::vector<int64_t>& ranks) { return ranks.size() > 1; });
}

std::unique_ptr<HierarchicalAllReduce> HierarchicalAllReduce::join(
    const c10::intrusive_ptr<c10d::Store>& store, const std::shared_ptr<gloo::transport::Device>& device, int64_t rank,
    const std::vector<std::string>& hosts, std::chrono::milliseconds timeout, const std::string& describe,
    const SharedMemoryGroup::Exchange& agree, std::string* why_not) {
  const auto by_host = ranks_by_host(hosts);
  size_t host = 0;
  while (std::find(by_host[host].begin(), by_host[host].end(), rank) == by_host[host].end()) ++host;
  const auto& mine = by_host[host];
  const int64_t local_rank = std::find(mine.begin(), mine.end(), rank) - mine.begin();
  const auto local_size = static_cast<int64_t>(mine.size());

  std::unique_ptr<HierarchicalAllReduce> hierarchy(new HierarchicalAllReduce());
  hierarchy->group_size_ = static_cast<int64_t>(hosts.size());
  hierarchy->host_count_ = static_cast<int64_t>(by_host.size());
  hierarchy->timeout_ = timeout;
  hierarchy->describe_ = describe;
  // First every host's own segment (hosts in parallel, each through its own Gloo group), then the
  // leaders' group, then the whole group agrees.
  std::string problem;
  if (local_size > 1) {
    const std::string prefix = "host_" + std::to_string(host);
    hierarchy->host_group_ = connected_gloo_group(c10::make_intrusive<c10d::PrefixStore>(prefix, store), local_rank,
                                                  local_size, device, timeout, hierarchy->host_entry_);
    auto* self = hierarchy.get();
    hierarchy->local_ = SharedMemoryGroup::join(
        [self, local_size, timeout](const std::string& bytes) {
          return all_gather_bytes_unnumbered(*self->host_group_, self->host_entry_, local_size, timeout, bytes);
        },
        local_rank, local_size, timeout, describe + " (the ranks on host " + std::to_string(host) + ")",
        SharedMemoryGroup::kDefaultSlotBytes, &problem, hosts[static_cast<size_t>(rank)]);
  }
  if (local_rank == 0) {
    hierarchy->leaders_ = connected_gloo_group(c10::make_intrusive<c10d::PrefixStore>("leaders", store),
                                               static_cast<int64_t>(host), static_cast<int64_t>(by_host.size()), device,
                                               timeout, hierarchy->leaders_entry_);
  }
  const auto verdicts = agree(problem.empty() ? std::string() : "host " + std::to_string(host) + ": " + problem);
  for (const auto& verdict : verdicts) {
    if (verdict.empty()) continue;
    if (why_not) *why_not = verdict;
    return nullptr;
  }
  return hierarchy;
}

void HierarchicalAllReduce::all_reduce(torch::Tensor& tensor, ReduceOp op) {
  VOLT_INTERNAL_ASSERT(SharedMemoryGroup::accepts(tensor, op) && tensor.is_contiguous(),
                       "HierarchicalAllReduce::all_reduce: what SharedMemoryGroup's reductions take");
  torch::NoGradGuard no_grad;
  const ReduceOp combined = op == ReduceOp::Mean ? ReduceOp::Sum : op;  // divided once, by the leaders
  if (local_) local_->reduce(tensor, 0, combined);
  if (leaders_) {
    try {
      auto wire = tensor.scalar_type() == torch::kBFloat16 && !compat::kGlooReducesBfloat16 ? tensor.to(torch::kFloat)
                                                                                              : tensor;
      c10d::AllreduceOptions options;
      options.reduceOp = to_c10d(combined);
      options.timeout = timeout_;
      std::vector<at::Tensor> tensors{wire};
      leaders_entry_.enter([&] { return leaders_->allreduce(tensors, options); })->wait(timeout_);
      if (op == ReduceOp::Mean) wire.div_(static_cast<double>(group_size_));
      if (!wire.is_same(tensor)) tensor.copy_(wire);
    } catch (const std::exception& e) {
      // The host's ranks wait in the broadcast below: they fail now, naming this rank.
      if (local_) local_->abandon();
      throw DistributedError(describe_ + ": all_reduce among the hosts' leaders over Gloo failed: " + e.what());
    }
  }
  if (local_) local_->broadcast(tensor, 0);
}

}  // namespace volt
