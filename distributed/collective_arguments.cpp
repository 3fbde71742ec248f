#include "distributed/collective_arguments.h"

#include "core/error.h"

namespace volt {

CollectiveArguments::CollectiveArguments(std::string group, int64_t size, bool device_bound, torch::Device device)
    : group_(std::move(group)), size_(size), device_bound_(device_bound), device_(device) {}

void CollectiveArguments::tensor(const torch::Tensor& tensor, const char* what) const {
  check<ConfigurationError>(tensor.defined(), group_, ": ", what, " expects a defined tensor, got an undefined one");
  check<ConfigurationError>(tensor.layout() == torch::kStrided, group_, ": ", what,
                            " expects a dense tensor, got layout ", tensor.layout());
  check<ConfigurationError>(!device_bound_ || tensor.device() == device_, group_, ": ", what,
                            " on the nccl backend expects a tensor on this rank's device ", device_.str(),
                            " (Note [NCCL and this rank's device]), got one on ", tensor.device().str(),
                            "; move it there first (the blocking form takes a CPU tensor)");
}

void CollectiveArguments::mean(const torch::Tensor& tensor, ReduceOp op, const char* what) const {
  check<ConfigurationError>(op != ReduceOp::Mean || tensor.is_floating_point(), group_, ": ", what,
                            " with ReduceOp::Mean expects a floating-point tensor, got ", tensor.dtype(),
                            "; use Sum and divide, or convert the tensor");
}

void CollectiveArguments::output(const torch::Tensor& output, const torch::Tensor& input, int64_t numel,
                                 const char* what, const char* rule) const {
  tensor(output, what);
  check<ConfigurationError>(output.is_contiguous(), group_, ": ", what, " expects a contiguous output, got one "
                            "with strides ", output.strides(), "; pass a contiguous buffer");
  check<ConfigurationError>(output.scalar_type() == input.scalar_type() && output.device() == input.device(),
                            group_, ": ", what, " expects an output of the input's dtype and device (",
                            input.dtype(), " on ", input.device(), "), got ", output.dtype(), " on ",
                            output.device());
  check<ConfigurationError>(output.numel() == numel, group_, ": ", what, " expects an output of ", rule, " = ",
                            numel, " elements, got ", output.numel(), " (input has ", input.numel(),
                            ", group size ", size_, ")");
}

void CollectiveArguments::chunks(const torch::Tensor& flat, const std::vector<int64_t>& counts,
                                 const char* what) const {
  tensor(flat, what);
  check<ConfigurationError>(flat.is_contiguous(), group_, ": ", what, " expects a contiguous tensor, got one "
                            "with strides ", flat.strides(), "; pass a contiguous buffer");
  check<ConfigurationError>(static_cast<int64_t>(counts.size()) == size_, group_, ": ", what,
                            " expects one count per rank (", size_, "), got ", counts.size());
  int64_t total = 0;
  for (const int64_t count : counts) {
    check<ConfigurationError>(count >= 0, group_, ": ", what, " expects counts >= 0, got ", count);
    total += count;
  }
  check<ConfigurationError>(total == flat.numel(), group_, ": ", what, " expects counts summing to the tensor's ",
                            flat.numel(), " elements, got ", total);
}

void CollectiveArguments::root(int64_t root, const char* what) const {
  check<ConfigurationError>(root >= 0 && root < size_, group_, ": ", what, " expects a root rank in [0, ",
                            size_, "), got ", root);
}

void CollectiveArguments::peer(int64_t peer, int64_t self, const char* what) const {
  check<ConfigurationError>(peer >= 0 && peer < size_ && peer != self, group_, ": ", what,
                            " expects another rank of the group, in [0, ", size_, ") and not ", self, ", got ", peer);
}

}  // namespace volt
