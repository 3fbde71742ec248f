// HostSnapshot (Note [Snapshots of device memory]) on the CPU: a snapshot holds the values at the
// call whatever the originals become, rebuilds every container, and refills the host tensors of
// the previous snapshot where the shapes and dtypes match (one allocation for a run's saves).
#include <gtest/gtest.h>

#include "strategies/host_snapshot.h"

namespace volt {
namespace {

c10::IValue nested(const torch::Tensor& a, const torch::Tensor& b) {
  c10::impl::GenericDict dict(c10::StringType::get(), c10::AnyType::get());
  dict.insert("a", a);
  dict.insert("list", std::vector<torch::Tensor>{b, b.mul(2)});
  dict.insert("step", int64_t{3});
  return dict;
}

TEST(HostSnapshot, HoldsTheValuesAtTheCallAndReusesItsHostTensors) {
  auto a = torch::arange(6, torch::kFloat).view({2, 3});
  auto b = torch::ones({4}, torch::kDouble);
  HostSnapshot snapshot;
  const auto first = snapshot.take(nested(a, b)).toGenericDict();
  snapshot.wait_until_copied();
  a.add_(100);
  b.zero_();
  EXPECT_TRUE(torch::equal(first.at("a").toTensor(), torch::arange(6, torch::kFloat).view({2, 3})));
  EXPECT_TRUE(torch::equal(first.at("list").toTensorVector().at(0), torch::ones({4}, torch::kDouble)));
  EXPECT_EQ(first.at("step").toInt(), 3);
  EXPECT_EQ(snapshot.held_bytes(), 6 * 4 + 4 * 8 * 2);
  EXPECT_EQ(snapshot.pinned_bytes(), 0);  // nothing came from a device
  const void* kept = first.at("a").toTensor().data_ptr();
  // The next snapshot of the same shapes refills the same host memory.
  const auto second = snapshot.take(nested(a, b)).toGenericDict();
  EXPECT_EQ(second.at("a").toTensor().data_ptr(), kept);
  EXPECT_TRUE(torch::equal(second.at("a").toTensor(), a));
  // Another shape at that place gets a tensor of its own.
  const auto third = snapshot.take(nested(torch::zeros({5}), b)).toGenericDict();
  EXPECT_EQ(third.at("a").toTensor().sizes(), torch::IntArrayRef({5}));
  EXPECT_EQ(snapshot.held_bytes(), 5 * 4 + 4 * 8 * 2);
}

}  // namespace
}  // namespace volt
