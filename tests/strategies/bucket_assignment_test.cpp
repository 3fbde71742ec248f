// Bucket assignment (Note [Bucket order]) on its own: no communication.
#include <gtest/gtest.h>

#include "strategies/buckets/bucket_assignment.h"
#include "core/error.h"

namespace volt::buckets {
namespace {

using Buckets = std::vector<std::vector<size_t>>;

std::vector<torch::Tensor> floats(const std::vector<int64_t>& numels) {
  std::vector<torch::Tensor> out;
  for (const auto n : numels) out.push_back(torch::zeros({n}));
  return out;
}

TEST(BucketAssignmentTest, ReverseOrderWithASmallFirstBucket) {
  // 4-byte floats: caps of 40 bytes (first) and 100 bytes (later).
  const auto params = floats({5, 5, 5, 5, 5, 5, 5, 5});
  const BucketLimits limits{40, 100};
  const auto buckets = assign_buckets(params, reverse_registration_order(params.size()), limits);
  // First bucket closes at 40 bytes (2 params), later ones at 100 bytes (5 params).
  EXPECT_EQ(buckets, (Buckets{{7, 6}, {5, 4, 3, 2, 1}, {0}}));
}

TEST(BucketAssignmentTest, DefaultCapsArePyTorchs) {
  const BucketLimits limits;
  EXPECT_EQ(limits.first_bucket_bytes, 1 << 20);
  EXPECT_EQ(limits.bucket_bytes, 25 << 20);
}

TEST(BucketAssignmentTest, AParameterLargerThanTheCapGetsItsOwnBucket) {
  const auto params = floats({1, 1000, 1, 1});
  const auto buckets = assign_buckets(params, reverse_registration_order(4), BucketLimits{8, 8});
  EXPECT_EQ(buckets, (Buckets{{3, 2}, {1}, {0}}));
}

TEST(BucketAssignmentTest, DtypesNeverShareABucket) {
  std::vector<torch::Tensor> params{torch::zeros({2}), torch::zeros({2}, torch::kDouble), torch::zeros({2}),
                                    torch::zeros({2}, torch::kDouble)};
  const auto buckets = assign_buckets(params, reverse_registration_order(4), BucketLimits{1 << 20, 1 << 20});
  // Ordered by the position of their first member in the order 3, 2, 1, 0.
  EXPECT_EQ(buckets, (Buckets{{3, 1}, {2, 0}}));
}

TEST(BucketAssignmentTest, FollowsAGivenReadyOrder) {
  const auto params = floats({5, 5, 5, 5});
  const auto buckets = assign_buckets(params, {2, 0, 3, 1}, BucketLimits{20, 40});
  EXPECT_EQ(buckets, (Buckets{{2}, {0, 3}, {1}}));
}

TEST(BucketAssignmentTest, RejectsBadOrders) {
  const auto params = floats({1, 1});
  EXPECT_THROW(assign_buckets(params, {0, 0}, BucketLimits{}), ConfigurationError);
  EXPECT_THROW(assign_buckets(params, {0, 2}, BucketLimits{}), ConfigurationError);
  EXPECT_THROW(assign_buckets(params, {0, 1}, BucketLimits{0, 10}), ConfigurationError);
}

}  // namespace
}  // namespace volt::buckets
