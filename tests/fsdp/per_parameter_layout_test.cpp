// The per-parameter layout (Note [Per-parameter layout]) on ranks as threads: the geometry (rows
// per rank, trainable chunks first, padding zero, a copy in and out is the identity); each rank's
// shard of every parameter is its rows, in the parameter's shape, frozen parameters included; a
// gather gives the parameters back bit for bit; a unit's backward leaves each trainable shard the
// mean of its rows' gradients and frozen ones none, whatever the order of its gradients and its
// input's; one that cannot know when its backward is over stays gathered until the end of it.
#include <gtest/gtest.h>

#include "strategies/fsdp/fully_sharded_module.h"
#include "strategies/fsdp/parameter_chunks.h"
#include "tests/distributed/thread_ranks.h"

namespace volt::fsdp {
namespace {

using testing::with_communicators;

TEST(ParameterChunks, RowsPerRankTrainableFirstAndTheLastRanksPadded) {
  // [5, 3] trainable, [2] frozen, a 0-d trainable, [7] trainable, over 3 ranks.
  const auto layout = layout_chunks({{5, 3}, {2}, {}, {7}}, {true, false, true, true}, 3);
  ASSERT_EQ(layout.chunks.size(), 4u);
  EXPECT_EQ(layout.chunks[0].chunk_rows, 2);
  EXPECT_EQ(layout.chunks[0].row_numel, 3);
  EXPECT_EQ(layout.chunks[1].chunk_rows, 1);
  EXPECT_EQ(layout.chunks[2].chunk_rows, 1);
  EXPECT_EQ(layout.chunks[3].chunk_rows, 3);
  // Trainable first: [5,3] at 0 (6), the 0-d at 6 (1), [7] at 7 (3), then the frozen at 10 (1).
  EXPECT_EQ(layout.chunks[0].offset, 0);
  EXPECT_EQ(layout.chunks[2].offset, 6);
  EXPECT_EQ(layout.chunks[3].offset, 7);
  EXPECT_EQ(layout.chunks[1].offset, 10);
  EXPECT_EQ(layout.gradient_numel, 10);
  EXPECT_EQ(layout.block_numel, 11);
  // Rank 2 holds row 4 of the [5, 3] (one row of its two), nothing of the 0-d, row 6 of the [7].
  EXPECT_EQ(layout.chunks[0].begin(2), 12);
  EXPECT_EQ(layout.chunks[0].count(2), 3);
  EXPECT_EQ(layout.chunks[2].count(1), 0);
  EXPECT_EQ(layout.chunks[3].count(2), 1);
  EXPECT_EQ(layout.chunks[0].chunk_shape({5, 3}), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(layout.chunks[2].chunk_shape({}), (std::vector<int64_t>{1}));
}

TEST(ParameterChunks, CopiedIntoTheBlocksAndOutAgainIsTheIdentityWithZeroPadding) {
  for (const int64_t world : {1, 2, 3, 4, 8}) {
    const std::vector<std::vector<int64_t>> shapes{{5, 3}, {2}, {}, {7, 2, 2}};
    const auto layout = layout_chunks(shapes, {true, true, true, true}, world);
    auto blocks = torch::full({world, layout.block_numel}, 99.0);
    std::vector<torch::Tensor> values;
    for (const auto& shape : shapes) values.push_back(torch::randn(shape));
    const auto columns = [&](size_t i) {
      return blocks.narrow(1, layout.chunks[i].offset, layout.chunks[i].chunk_numel());
    };
    for (size_t i = 0; i < shapes.size(); ++i) copy_chunks_in(values[i].reshape({-1}), layout.chunks[i], columns(i), 2.0);
    EXPECT_EQ(blocks.eq(99.0).sum().item<int64_t>(), 0) << "every element of the blocks written, world " << world;
    for (size_t i = 0; i < shapes.size(); ++i) {
      const auto& chunk = layout.chunks[i];
      auto out = torch::empty(shapes[i]);
      copy_chunks_out(columns(i), chunk, out);
      EXPECT_TRUE(torch::equal(out, values[i] / 2.0)) << "parameter " << i << ", world " << world;
      for (int64_t r = 0; r < world; ++r) {
        const auto padding = blocks[r].narrow(0, chunk.offset + chunk.count(r), chunk.chunk_numel() - chunk.count(r));
        EXPECT_TRUE(padding.eq(0).all().item<bool>()) << "parameter " << i << ", rank " << r << ", world " << world;
      }
    }
  }
}

// Parameters of different dtypes: the shard block is bytes, each chunk at an aligned byte offset;
// the gathered block is of one dtype where mixed precision casts them all to it; the gradient
// block holds the trainable chunks in elements.
TEST(ParameterChunks, MixedDtypesAreBytesAlignedPerChunkAndTheGradientStaysInElements) {
  // [5, 3] float32 trainable, [5] bfloat16 frozen, [5] float64 trainable, over 2 ranks.
  const auto layout = layout_chunks({{5, 3}, {5}, {5}}, {true, false, true}, 2,
                                    {torch::kFloat, torch::kBFloat16, torch::kDouble},
                                    {torch::kBFloat16, torch::kBFloat16, torch::kBFloat16});
  EXPECT_EQ(layout.block_dtype, torch::kByte);
  // Trainable first: 9 floats (36 bytes) at 0, 3 doubles at 48 (36 rounded up), then 3 bfloat16 at 80.
  EXPECT_EQ(layout.chunks[0].offset, 0);
  EXPECT_EQ(layout.chunks[2].offset, 48);
  EXPECT_EQ(layout.chunks[1].offset, 80);
  EXPECT_EQ(layout.block_numel, 96) << "86 bytes, a multiple of the alignment";
  EXPECT_EQ(layout.gathered_dtype, torch::kBFloat16) << "one compute dtype: elements";
  EXPECT_EQ(layout.chunks[2].gathered_offset, 9);
  EXPECT_EQ(layout.chunks[1].gathered_offset, 12);
  EXPECT_EQ(layout.gathered_numel, 15);
  EXPECT_EQ(layout.chunks[2].gradient_offset, 9);
  EXPECT_EQ(layout.gradient_numel, 12);
  // Each chunk viewed as its own dtype in a block of bytes.
  auto blocks = torch::zeros({2, layout.block_numel}, torch::kByte);
  const auto doubles = typed_span(blocks, layout.chunks[2].offset, 3, torch::kDouble);
  EXPECT_EQ(doubles.sizes(), (std::vector<int64_t>{2, 3}));
  doubles.fill_(1.5);
  EXPECT_EQ(typed_span(blocks[1], layout.chunks[2].offset, 3, torch::kDouble)[2].item<double>(), 1.5);
  EXPECT_EQ(typed_span(blocks, 0, 9, torch::kFloat).abs().sum().item<float>(), 0.0f) << "its neighbour untouched";
}

// weight [5, 3] (5 rows: uneven on 2, 3 and 4 ranks), bias [5], and a frozen scale [5]: y =
// (W x + b) * scale. The same values on every rank.
struct ScaledLinear {
  torch::Tensor weight = (torch::arange(15, torch::kFloat).reshape({5, 3}) * 0.125 - 0.75).set_requires_grad(true);
  torch::Tensor bias = (torch::arange(5, torch::kFloat) * 0.25).set_requires_grad(true);
  torch::Tensor scale = torch::tensor({1.0f, -2.0f, 0.5f, 3.0f, -1.0f});  // frozen
  std::vector<std::pair<std::string, torch::Tensor>> named() const {
    return {{"weight", weight}, {"scale", scale}, {"bias", bias}};
  }
  torch::Tensor forward(const torch::Tensor& x) const { return torch::addmm(bias, x, weight.t()) * scale; }
};

// The unsharded reference: the mean over `n` ranks of each rank's weight and bias gradient (rank
// r's input all r + 1).
template <typename Model>
std::pair<torch::Tensor, torch::Tensor> mean_gradients(int64_t n) {
  std::vector<torch::Tensor> weights, biases;
  for (int64_t r = 0; r < n; ++r) {
    Model reference;
    reference.forward(torch::full({1, 3}, static_cast<double>(r + 1))).sum().backward();
    weights.push_back(reference.weight.grad());
    biases.push_back(reference.bias.grad());
  }
  return {torch::stack(weights).mean(0), torch::stack(biases).mean(0)};
}

// Rank `rank`'s rows of a 5-row `full` cut into `rows` a rank over `n`, the rows past the end zero.
torch::Tensor own_padded_rows(const torch::Tensor& full, int64_t rows, int64_t n, int64_t rank) {
  auto out = torch::zeros({rows * n, full.numel() / 5}, full.options());
  out.narrow(0, 0, 5).copy_(full.reshape({5, -1}));
  return out.narrow(0, rank * rows, rows);
}

// `model` as one unit in the per-parameter layout over `c`, its gradients reduced through `bucket`.
std::shared_ptr<FullyShardedUnit> per_parameter_unit(ScaledLinear& model, Communicator& c,
                                                     ReduceScatterBucket& bucket) {
  UnitSettings settings;
  settings.pre_divide = gradient_pre_divide_factor(c.size());
  return std::make_shared<FullyShardedUnit>(
      "scaled",
      std::make_unique<FlatParameter>(model.named(), c, torch::kFloat, nullptr, 0, false, ShardLayout::PerParameter),
      settings, bucket);
}

class PerParameterFlat : public ::testing::TestWithParam<int64_t> {};

TEST_P(PerParameterFlat, EachRankKeepsItsRowsOfEveryParameterFrozenOnesTooAndGathersThemBack) {
  const int64_t n = GetParam();
  with_communicators(n, [&](Communicator& c) {
    ScaledLinear model;
    const auto weight = model.weight.detach().clone(), bias = model.bias.detach().clone(),
               scale = model.scale.clone();
    FlatParameter flat(model.named(), c, torch::kFloat, nullptr, 0, false, ShardLayout::PerParameter);
    flat.release();
    EXPECT_EQ(model.weight.numel(), 0) << "released";
    const int64_t rows = (5 + n - 1) / n;
    // This rank's rows of a 5-row parameter, padded with zero rows, in the parameter's shape.
    const auto own_rows = [&](const torch::Tensor& full) {
      auto padded = torch::zeros({rows * n, full.numel() / 5});
      padded.narrow(0, 0, 5).copy_(full.reshape({5, -1}));
      auto shape = full.sizes().vec();
      shape[0] = rows;
      return padded.narrow(0, c.rank() * rows, rows).reshape(shape);
    };
    ASSERT_EQ(flat.entries().size(), 3u);
    EXPECT_TRUE(torch::equal(flat.stepped(0), own_rows(weight))) << "rank " << c.rank();
    EXPECT_TRUE(torch::equal(flat.stepped(1), own_rows(scale))) << "rank " << c.rank();
    EXPECT_TRUE(torch::equal(flat.stepped(2), own_rows(bias))) << "rank " << c.rank();
    EXPECT_TRUE(flat.stepped(0).requires_grad() && flat.stepped(0).is_leaf());
    EXPECT_FALSE(flat.stepped(1).requires_grad()) << "a frozen parameter's shard is frozen";
    EXPECT_EQ(flat.stepped_tensors().size(), 3u);
    EXPECT_EQ(flat.shard_numel(), rows * 5) << "the block: 3 + 1 + 1 elements a row";
    EXPECT_EQ(flat.gradient_numel(), n * rows * 4) << "the trainable prefix: weight and bias";
    const std::vector<torch::Tensor> whole{weight, scale, bias};
    const auto equal_to_whole = [&](const std::vector<torch::Tensor>& values) {
      if (values.size() != whole.size()) return false;
      for (size_t i = 0; i < whole.size(); ++i)
        if (!torch::equal(values[i], whole[i])) return false;
      return true;
    };
    for (int64_t root : {int64_t{0}, n - 1}) {
      const auto gathered = flat.parameters_gathered_to(root);
      if (c.rank() == root) {
        EXPECT_TRUE(equal_to_whole(gathered)) << "root " << root;
      }
      if (c.rank() != root) {
        EXPECT_TRUE(gathered.empty());
      }
      const auto weight_rows = flat.gather_stepped_to(0, flat.stepped(0), root);
      if (c.rank() == root) {
        EXPECT_TRUE(torch::equal(weight_rows, weight.flatten()));
      }
    }
    flat.gather();
    EXPECT_TRUE(torch::equal(model.weight.detach(), weight));
    EXPECT_TRUE(torch::equal(model.bias.detach(), bias));
    EXPECT_TRUE(torch::equal(model.scale, scale));
    EXPECT_TRUE(equal_to_whole(flat.full_parameters()));
  });
}

TEST_P(PerParameterFlat, AUnitsBackwardLeavesEachTrainableShardTheMeanOfItsRowsAndFrozenOnesNone) {
  const int64_t n = GetParam();
  with_communicators(n, [&](Communicator& c) {
    const auto [expected_weight, expected_bias] = mean_gradients<ScaledLinear>(n);
    ScaledLinear model;
    const auto scale = model.scale.clone();  // the model's reads as empty once released
    ReduceScatterBucket bucket(c, 0);
    auto unit = per_parameter_unit(model, c, bucket);
    // The input requires grad (an earlier unit's output): the unit waits for its gradient too, so
    // the frozen scale is still there when the input's gradient is computed through it.
    auto input = torch::full({1, 3}, static_cast<double>(c.rank() + 1)).set_requires_grad(true);
    std::vector<torch::Tensor> inputs{input};
    auto output = forward_in_unit(unit.get(), [&] { return model.forward(inputs[0]); }, &inputs);
    EXPECT_FALSE(inputs[0].is_same(input)) << "the unit's alias, whose gradient goes through its node";
    EXPECT_FALSE(unit->flat().gathered()) << "resharded after forward";
    unit->start_backward(true);
    output.sum().backward();
    EXPECT_FALSE(unit->flat().gathered()) << "released once the input's gradient was computed";
    unit->finish_backward();
    bucket.flush();
    const int64_t rows = (5 + n - 1) / n;
    const auto padded = [&](const torch::Tensor& full) { return own_padded_rows(full, rows, n, c.rank()); };
    EXPECT_TRUE(torch::allclose(unit->flat().stepped(0).grad().reshape({rows, -1}), padded(expected_weight), 1e-6,
                                1e-7))
        << "rank " << c.rank();
    EXPECT_TRUE(torch::allclose(unit->flat().stepped(2).grad().reshape({rows, -1}), padded(expected_bias), 1e-6,
                                1e-7))
        << "rank " << c.rank();
    EXPECT_FALSE(unit->flat().stepped(1).grad().defined()) << "no gradient storage for a frozen parameter";
    EXPECT_EQ(unit->flat().shard_gradient_bytes(), rows * 4 * 4);
    // The input's gradient went through the frozen scale and the gathered weight.
    const auto expected_input =
        (scale.unsqueeze(1) * (torch::arange(15, torch::kFloat).reshape({5, 3}) * 0.125 - 0.75)).sum(0);
    EXPECT_TRUE(torch::allclose(input.grad().flatten(), expected_input, 1e-6, 1e-6));
  });
}

// A unit with frozen parameters none of whose inputs requires grad cannot know when its backward
// is over (a frozen parameter's backward may still feed a unit inside it): it stays gathered
// until the end of backward, as does one whose inputs are not known.
TEST_P(PerParameterFlat, AUnitWithFrozenParametersAndNoWatchedInputIsReleasedAtTheEndOfBackward) {
  const int64_t n = GetParam();
  with_communicators(n, [&](Communicator& c) {
    for (const bool inputs_known : {true, false}) {
      ScaledLinear model;
      ReduceScatterBucket bucket(c, 0);
      auto unit = per_parameter_unit(model, c, bucket);
      std::vector<torch::Tensor> inputs{torch::ones({1, 3})};  // data: no gradient
      auto output = forward_in_unit(
          unit.get(), [&] { return model.forward(inputs[0]); },
          inputs_known ? &inputs : nullptr);
      unit->start_backward(true);
      output.sum().backward();
      EXPECT_TRUE(unit->flat().gathered()) << "released while a backward might still read it; inputs known: "
                                           << inputs_known;
      unit->finish_backward();
      bucket.flush();
      EXPECT_FALSE(unit->flat().gathered()) << "inputs known: " << inputs_known;
      EXPECT_TRUE(unit->flat().stepped(0).grad().defined()) << "reduced at the end of backward";
    }
  });
}

// A unit of three dtypes: weight float32 and bias float64 trained, scale bfloat16 frozen (a LoRA
// model's bfloat16 base beside float32 adapters). Its shard is bytes, each parameter's shard a
// leaf of its own dtype; the parameters gather back bit for bit in their dtypes, or all in
// bfloat16 under mixed precision (one all-gather either way); the gradients are reduced in one
// float32 reduce-scatter and land in each shard's dtype.
struct MixedScaledLinear {
  torch::Tensor weight = (torch::arange(15, torch::kFloat).reshape({5, 3}) * 0.125 - 0.75).set_requires_grad(true);
  torch::Tensor bias = (torch::arange(5, torch::kDouble) * 0.25).set_requires_grad(true);
  torch::Tensor scale = torch::tensor({1.0f, -2.0f, 0.5f, 3.0f, -1.0f}).to(torch::kBFloat16);  // frozen
  std::vector<std::pair<std::string, torch::Tensor>> named() const {
    return {{"weight", weight}, {"scale", scale}, {"bias", bias}};
  }
  torch::Tensor forward(const torch::Tensor& x) const {
    return torch::addmm(bias.to(torch::kFloat), x, weight.t()) * scale.to(torch::kFloat);
  }
};

TEST_P(PerParameterFlat, MixedDtypesShardAsBytesAndGatherBackInTheirOwnDtypesOrTheCastOne) {
  const int64_t n = GetParam();
  with_communicators(n, [&](Communicator& c) {
    for (const bool mixed_precision : {false, true}) {
      MixedScaledLinear model;
      const std::vector<torch::Tensor> whole{model.weight.detach().clone(), model.scale.clone(),
                                             model.bias.detach().clone()};
      FlatParameter flat(model.named(), c,
                         mixed_precision ? std::optional<torch::Dtype>(torch::kBFloat16) : std::nullopt, nullptr, 0,
                         false, ShardLayout::PerParameter);
      flat.release();
      EXPECT_EQ(flat.shard().scalar_type(), torch::kByte);
      EXPECT_EQ(flat.stepped(0).scalar_type(), torch::kFloat);
      EXPECT_EQ(flat.stepped(1).scalar_type(), torch::kBFloat16);
      EXPECT_EQ(flat.stepped(2).scalar_type(), torch::kDouble);
      const auto full = flat.full_parameters();
      ASSERT_EQ(full.size(), 3u);
      for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(torch::equal(full[i], whole[i])) << "parameter " << i;
      c.reset_counters();
      flat.gather();
      EXPECT_EQ(c.counters()[CollectiveKind::AllGather].calls, 1) << "one all-gather for the three dtypes";
      for (size_t i = 0; i < 3; ++i) {
        const auto& parameter = flat.entries()[i].parameter;
        const auto expected = mixed_precision ? whole[i].to(torch::kBFloat16) : whole[i];
        EXPECT_EQ(parameter.scalar_type(), expected.scalar_type()) << "parameter " << i;
        EXPECT_TRUE(torch::equal(parameter.detach(), expected)) << "parameter " << i << ", rank " << c.rank();
      }
      flat.restore_parameters();
      for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(torch::equal(flat.entries()[i].parameter.detach(), whole[i]));
    }
  });
}

TEST_P(PerParameterFlat, MixedDtypesReduceInOneReduceScatterIntoEachShardsDtype) {
  const int64_t n = GetParam();
  with_communicators(n, [&](Communicator& c) {
    const auto [expected_weight, expected_bias] = mean_gradients<MixedScaledLinear>(n);
    MixedScaledLinear model;
    ReduceScatterBucket bucket(c, 0);
    UnitSettings settings;
    settings.pre_divide = gradient_pre_divide_factor(c.size());
    auto unit = std::make_shared<FullyShardedUnit>(
        "mixed",
        std::make_unique<FlatParameter>(model.named(), c, std::nullopt, nullptr, 0, false, ShardLayout::PerParameter),
        settings, bucket);
    auto input = torch::full({1, 3}, static_cast<double>(c.rank() + 1)).set_requires_grad(true);
    std::vector<torch::Tensor> inputs{input};
    auto output = forward_in_unit(unit.get(), [&] { return model.forward(inputs[0]); }, &inputs);
    c.reset_counters();
    unit->start_backward(true);
    output.sum().backward();
    unit->finish_backward();
    bucket.flush();
    EXPECT_EQ(c.counters()[CollectiveKind::ReduceScatter].calls, 1) << "one reduce-scatter for the float32 and float64 gradients";
    const int64_t rows = (5 + n - 1) / n;
    const auto padded = [&](const torch::Tensor& full) { return own_padded_rows(full, rows, n, c.rank()); };
    const auto& flat = unit->flat();
    ASSERT_EQ(flat.stepped(2).grad().scalar_type(), torch::kDouble);
    EXPECT_TRUE(torch::allclose(flat.stepped(0).grad().reshape({rows, -1}), padded(expected_weight), 1e-6, 1e-7))
        << "rank " << c.rank();
    EXPECT_TRUE(torch::allclose(flat.stepped(2).grad().reshape({rows, -1}), padded(expected_bias), 1e-6, 1e-7))
        << "rank " << c.rank();
    EXPECT_FALSE(flat.stepped(1).grad().defined());
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, PerParameterFlat, ::testing::Values(2, 3, 4));

}  // namespace
}  // namespace volt::fsdp
