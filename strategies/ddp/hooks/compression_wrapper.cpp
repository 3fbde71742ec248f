#include "strategies/ddp/hooks/compression_wrapper.h"

#include "core/error.h"

namespace volt::ddp {

CompressionWrapper::CompressionWrapper(torch::Dtype dtype, std::unique_ptr<CommHook> inner)
    : dtype_(dtype), inner_(std::move(inner)) {
  check<ConfigurationError>(dtype_ == torch::kHalf || dtype_ == torch::kBFloat16,
                            "comm hook wrapper: expected float16 or bfloat16, got ", c10::toString(dtype_));
  check<ConfigurationError>(inner_ != nullptr, "comm hook wrapper: expected a hook to wrap, got nullptr");
}

std::string CompressionWrapper::name() const {
  return std::string(dtype_ == torch::kHalf ? "fp16" : "bf16") + "_compress_wrapper(" + inner_->name() + ")";
}

CollectiveHandle CompressionWrapper::run(GradBucket& bucket) {
  const auto original = bucket.buffer.scalar_type();
  bucket.buffer = bucket.buffer.to(dtype_);
  return inner_->run(bucket).then([original](const torch::Tensor& reduced) {
    return reduced.defined() ? reduced.to(original) : reduced;
  });
}

}  // namespace volt::ddp
