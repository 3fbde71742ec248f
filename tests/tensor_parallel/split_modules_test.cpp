// Modules split across ranks (Note [A module split across a group]): the plan's text; a colwise
// then rowwise pair of linears, an embedding split by its vocabulary and the cross-entropy over
// vocabulary slices, on 2 to 4 ranks as threads over Gloo, against the same modules and loss whole
// on one thread: outputs, the input's gradient and every parameter's gradient (each rank's slice
// of it), within the last bits (a rowwise output sums the ranks' partial products).
#include <gtest/gtest.h>

#include "nn/module_call.h"
#include "strategies/tensor_parallel/parallel_cross_entropy.h"
#include "strategies/tensor_parallel/parallel_embedding.h"
#include "strategies/tensor_parallel/parallel_linear.h"
#include "tests/distributed/thread_ranks.h"
#include "tests/support/test_support.h"

namespace volt {
namespace {

using tp::ParallelStyle;

TEST(TensorParallelPlan, ParsesPathsAndStylesAndRefusesWhatItCannotRead) {
  const auto plan = tp::parse_tensor_parallel_plan("body.0:colwise|blocks.*.proj:rowwise");
  ASSERT_EQ(plan.size(), 2u);
  EXPECT_EQ(plan[0].pattern, "body.0");
  EXPECT_EQ(plan[0].style, ParallelStyle::Colwise);
  EXPECT_EQ(plan[1].pattern, "blocks.*.proj");
  EXPECT_EQ(plan[1].style, ParallelStyle::Rowwise);
  EXPECT_TRUE(tp::path_matches("blocks.*.proj", "blocks.11.proj"));
  EXPECT_FALSE(tp::path_matches("blocks.*.proj", "blocks.11.attn.proj"));
  EXPECT_FALSE(tp::path_matches("body.0", "body.01"));
  EXPECT_NE(testing::configuration_error_of([] { tp::parse_tensor_parallel_plan(""); }).find("the plan is empty"),
            std::string::npos);
  EXPECT_NE(testing::configuration_error_of([] { tp::parse_tensor_parallel_plan("body.0"); }).find("has no style"),
            std::string::npos);
  EXPECT_NE(testing::configuration_error_of([] {
              tp::parse_tensor_parallel_plan("body.0:diagonal");
            }).find("the styles are colwise and rowwise"),
            std::string::npos);
  EXPECT_NE(testing::configuration_error_of([] {
              tp::parse_tensor_parallel_plan("body..0:colwise");
            }).find("empty path component"),
            std::string::npos);
  const auto fused = tp::parse_tensor_parallel_plan("blocks.*.qkv:colwise:3|blocks.*.proj:rowwise");
  EXPECT_EQ(fused[0].fused, 3);
  EXPECT_EQ(fused[1].fused, 1);
  EXPECT_EQ(tp::to_string(fused[0]), "blocks.*.qkv:colwise:3");
  for (const auto& [text, expected] : std::vector<std::pair<std::string, std::string>>{
           {"qkv:colwise:0", "fused count '0'"},
           {"qkv:colwise:x", "fused count 'x'"},
           {"qkv:colwise:3:1", "fused count '3:1'"},
           {"proj:rowwise:2", "a fused count applies to colwise linears"}}) {
    EXPECT_NE(testing::configuration_error_of([&] { tp::parse_tensor_parallel_plan(text); }).find(expected),
              std::string::npos)
        << text;
  }
}

// Linear(6, 8) colwise, tanh, Linear(8, 5) rowwise on `world` ranks: like the whole pair.
void expect_split_pair_like_whole(int64_t world) {
  torch::manual_seed(3);
  torch::nn::Linear first(6, 8), second(8, 5);
  const auto x = torch::randn({3, 6});
  const auto x_whole = x.clone().requires_grad_(true);
  const auto y_whole = second->forward(torch::tanh(first->forward(x_whole)));
  y_whole.square().sum().backward();
  testing::with_communicators(world, [&](Communicator& group) {
    torch::nn::Linear a(6, 8), b(8, 5);
    {
      torch::NoGradGuard no_grad;
      a->weight.copy_(first->weight);
      a->bias.copy_(first->bias);
      b->weight.copy_(second->weight);
      b->bias.copy_(second->bias);
    }
    auto colwise = std::make_shared<tp::ParallelLinear>(*a, "a", ParallelStyle::Colwise, group);
    auto rowwise = std::make_shared<tp::ParallelLinear>(*b, "b", ParallelStyle::Rowwise, group);
    const int64_t r = group.rank();
    EXPECT_EQ(a->weight.sizes(), torch::IntArrayRef({8 / world, 6}));
    EXPECT_EQ(a->bias.sizes(), torch::IntArrayRef({8 / world}));
    EXPECT_EQ(b->weight.sizes(), torch::IntArrayRef({5, 8 / world}));
    EXPECT_EQ(b->bias.sizes(), torch::IntArrayRef({5}));
    add_forward_wrapper(*a, colwise);
    add_forward_wrapper(*b, rowwise);
    const auto input = x.clone().requires_grad_(true);
    const auto y = volt::call(b, torch::tanh(volt::call(a, input)));
    y.square().sum().backward();
    remove_forward_wrapper(*a, *colwise);
    remove_forward_wrapper(*b, *rowwise);
    const auto close = [](const torch::Tensor& got, const torch::Tensor& want) {
      return torch::allclose(got, want, /*rtol=*/1e-6, /*atol=*/1e-6);
    };
    const int64_t rows = 8 / world;
    EXPECT_TRUE(close(y, y_whole)) << "rank " << r;
    EXPECT_TRUE(close(input.grad(), x_whole.grad())) << "rank " << r << ": the input's gradient summed over the group";
    EXPECT_TRUE(close(a->weight.grad(), first->weight.grad().narrow(0, r * rows, rows))) << "rank " << r;
    EXPECT_TRUE(close(a->bias.grad(), first->bias.grad().narrow(0, r * rows, rows))) << "rank " << r;
    EXPECT_TRUE(close(b->weight.grad(), second->weight.grad().narrow(1, r * rows, rows))) << "rank " << r;
    EXPECT_TRUE(close(b->bias.grad(), second->bias.grad())) << "rank " << r;
    EXPECT_EQ(colwise->calls(), 1);
    colwise->restore();
    rowwise->restore();
    EXPECT_TRUE(torch::equal(a->weight, first->weight)) << "rank " << r << ": restored whole";
    EXPECT_TRUE(torch::equal(b->weight, second->weight)) << "rank " << r;
  });
}

TEST(ParallelLinear, AColwiseThenRowwisePairEqualsTheWholePair) {
  expect_split_pair_like_whole(2);
  expect_split_pair_like_whole(4);
}

// A fused q|k|v Linear(4, 12) split colwise:3, each third's slice side by side on each rank, then
// q*k + v into a rowwise Linear(4, 2): like the whole modules (outputs, gradients, each rank's
// slices of each third), and gathered back into the whole layout.
void expect_fused_projection_like_whole(int64_t world) {
  torch::manual_seed(7);
  torch::nn::Linear fused_whole(4, 12), out_whole(4, 2);
  const auto x = torch::randn({3, 4});
  const auto attend = [](const torch::Tensor& qkv) {
    const auto parts = qkv.chunk(3, -1);
    return parts[0] * parts[1] + parts[2];
  };
  const auto x_whole = x.clone().requires_grad_(true);
  const auto y_whole = out_whole->forward(attend(fused_whole->forward(x_whole)));
  y_whole.square().sum().backward();
  testing::with_communicators(world, [&](Communicator& group) {
    torch::nn::Linear fused(4, 12), out(4, 2);
    {
      torch::NoGradGuard no_grad;
      fused->weight.copy_(fused_whole->weight);
      fused->bias.copy_(fused_whole->bias);
      out->weight.copy_(out_whole->weight);
      out->bias.copy_(out_whole->bias);
    }
    auto colwise = std::make_shared<tp::ParallelLinear>(*fused, "qkv", ParallelStyle::Colwise, group, 3);
    auto rowwise = std::make_shared<tp::ParallelLinear>(*out, "out", ParallelStyle::Rowwise, group);
    const int64_t r = group.rank(), rows = 4 / world;
    // Rank r's rows of each of q, k and v, side by side.
    const auto each_third = [&](const torch::Tensor& whole) {
      std::vector<torch::Tensor> slices;
      for (int64_t part = 0; part < 3; ++part) slices.push_back(whole.narrow(0, part * 4 + r * rows, rows));
      return torch::cat(slices, 0);
    };
    EXPECT_TRUE(torch::equal(fused->weight, each_third(fused_whole->weight))) << "rank " << r;
    EXPECT_TRUE(torch::equal(fused->bias, each_third(fused_whole->bias))) << "rank " << r;
    EXPECT_TRUE(torch::equal(colwise->slice_of(fused->weight, fused_whole->weight), fused->weight));
    add_forward_wrapper(*fused, colwise);
    add_forward_wrapper(*out, rowwise);
    const auto input = x.clone().requires_grad_(true);
    const auto y = volt::call(out, attend(volt::call(fused, input)));
    y.square().sum().backward();
    remove_forward_wrapper(*fused, *colwise);
    remove_forward_wrapper(*out, *rowwise);
    const auto close = [](const torch::Tensor& got, const torch::Tensor& want) {
      return torch::allclose(got, want, /*rtol=*/1e-6, /*atol=*/1e-6);
    };
    EXPECT_TRUE(close(y, y_whole)) << "rank " << r;
    EXPECT_TRUE(close(input.grad(), x_whole.grad())) << "rank " << r;
    EXPECT_TRUE(close(fused->weight.grad(), each_third(fused_whole->weight.grad()))) << "rank " << r;
    EXPECT_TRUE(close(fused->bias.grad(), each_third(fused_whole->bias.grad()))) << "rank " << r;
    EXPECT_TRUE(torch::equal(colwise->gathered(fused->weight, fused->weight.detach()), fused_whole->weight))
        << "rank " << r << ": gathered into the whole layout";
    colwise->restore();
    rowwise->restore();
    EXPECT_TRUE(torch::equal(fused->weight, fused_whole->weight)) << "rank " << r << ": restored whole";
    EXPECT_TRUE(torch::equal(fused->bias, fused_whole->bias)) << "rank " << r;
  });
}

TEST(ParallelLinear, AFusedProjectionSplitsEachPart) {
  expect_fused_projection_like_whole(2);
  expect_fused_projection_like_whole(4);
}

TEST(ParallelLinear, RefusesFeaturesThatDoNotDivide) {
  testing::with_communicators(3, [&](Communicator& group) {
    torch::nn::Linear a(6, 8);
    EXPECT_NE(testing::configuration_error_of([&] {
                tp::ParallelLinear(*a, "body.0", ParallelStyle::Colwise, group);
              }).find("body.0 (colwise) has 8 output features, which do not divide among 3 ranks"),
              std::string::npos);
    torch::nn::Linear fused(6, 6);
    EXPECT_NE(testing::configuration_error_of([&] {
                tp::ParallelLinear(*fused, "qkv", ParallelStyle::Colwise, group, 3);
              }).find("qkv (colwise:3) has 6 output features, 3 fused parts, which do not divide among 3 ranks"),
              std::string::npos);
  });
}

void expect_split_embedding_like_whole(int64_t world) {
  torch::manual_seed(5);
  torch::nn::Embedding whole(12, 5);
  const auto ids = torch::randint(0, 12, {3, 4}, torch::kLong);
  whole->forward(ids).square().sum().backward();
  const auto want = whole->forward(ids).detach();
  testing::with_communicators(world, [&](Communicator& group) {
    torch::nn::Embedding table(12, 5);
    {
      torch::NoGradGuard no_grad;
      table->weight.copy_(whole->weight);
    }
    auto split = std::make_shared<tp::ParallelEmbedding>(*table, "wte", ParallelStyle::Rowwise, group);
    const int64_t rows = 12 / world, r = group.rank();
    EXPECT_EQ(table->weight.sizes(), torch::IntArrayRef({rows, 5}));
    add_forward_wrapper(*table, split);
    const auto out = volt::call(table, ids);
    out.square().sum().backward();
    remove_forward_wrapper(*table, *split);
    EXPECT_TRUE(torch::allclose(out, want, 1e-6, 1e-6)) << "rank " << r << ": every rank has the whole lookup";
    EXPECT_TRUE(torch::allclose(table->weight.grad(), whole->weight.grad().narrow(0, r * rows, rows), 1e-6, 1e-6))
        << "rank " << r << ": its rows' gradients";
  });
}

TEST(ParallelEmbedding, AVocabularySplitLooksUpLikeTheWholeTable) {
  expect_split_embedding_like_whole(2);
  expect_split_embedding_like_whole(3);
  testing::with_communicators(2, [&](Communicator& group) {
    torch::nn::Embedding padded(torch::nn::EmbeddingOptions(12, 5).padding_idx(0));
    EXPECT_NE(testing::configuration_error_of([&] {
                tp::ParallelEmbedding(*padded, "wte", ParallelStyle::Rowwise, group);
              }).find("padding_idx, max_norm or sparse"),
              std::string::npos);
    torch::nn::Embedding plain(12, 5);
    EXPECT_NE(testing::configuration_error_of([&] {
                tp::ParallelEmbedding(*plain, "wte", ParallelStyle::Colwise, group);
              }).find("split it by its vocabulary with rowwise"),
              std::string::npos);
  });
}

void expect_split_cross_entropy_like_whole(int64_t world) {
  torch::manual_seed(9);
  const auto logits = (3 * torch::randn({6, 12})).requires_grad_(true);
  const auto target = torch::randint(0, 12, {6}, torch::kLong);
  const auto want = torch::nn::functional::cross_entropy(logits, target);
  want.backward();
  testing::with_communicators(world, [&](Communicator& group) {
    const int64_t columns = 12 / world, r = group.rank();
    const auto slice = logits.detach().narrow(1, r * columns, columns).clone().requires_grad_(true);
    auto active = tp::ActiveTensorParallelGroup::activate(group);
    const auto loss = tp::cross_entropy(slice, target, 12);
    loss.backward();
    EXPECT_NEAR(loss.item<double>(), want.item<double>(), 1e-6) << "rank " << r;
    EXPECT_TRUE(torch::allclose(slice.grad(), logits.grad().narrow(1, r * columns, columns), 1e-6, 1e-7))
        << "rank " << r;
  });
}

TEST(ParallelCrossEntropy, OverVocabularySlicesEqualsTheWholeLoss) {
  expect_split_cross_entropy_like_whole(2);
  expect_split_cross_entropy_like_whole(4);
  // Outside a tensor_parallel step, on whole logits: torch's.
  const auto logits = torch::randn({4, 6});
  const auto target = torch::randint(0, 6, {4}, torch::kLong);
  EXPECT_TRUE(torch::equal(tp::cross_entropy(logits, target, 6), torch::nn::functional::cross_entropy(logits, target)));
  EXPECT_NE(testing::configuration_error_of([&] { tp::cross_entropy(logits, target, 12); })
                .find("the logits have 6 columns, neither the vocabulary's 12 nor its slice in a tensor_parallel step "
                      "(none runs)"),
            std::string::npos);
}

}  // namespace
}  // namespace volt
