#include "strategies/ddp/hooks/powersgd_hook.h"

#include <cmath>

#include "core/error.h"
#include "core/warning.h"
#include "strategies/ddp/hooks/low_rank.h"

namespace volt::ddp {

namespace {

// The keys both variants take.
OptionSchema<PowerSGDOptions> common_powersgd_keys(const std::string& owner) {
  return OptionSchema<PowerSGDOptions>(owner)
      .option("matrix_approximation_rank", &PowerSGDOptions::matrix_approximation_rank,
                  "rank of the low-rank approximation of each gradient matrix", at_least(int64_t{1}))
          .option("start_powersgd_iter", &PowerSGDOptions::start_powersgd_iter,
                  "synchronized iterations of plain all-reduce before compression starts", at_least(int64_t{0}))
          .alias("start_powerSGD_iter")  // PyTorch's spelling
          .option("use_error_feedback", &PowerSGDOptions::use_error_feedback,
                  "add what compression lost to the next iteration's gradient")
          .option("warm_start", &PowerSGDOptions::warm_start, "keep Q between iterations")
          .option("orthogonalization_epsilon", &PowerSGDOptions::orthogonalization_epsilon,
                  "added to each column norm when orthogonalizing (e.g. 1e-8 against all-zero columns)",
                  at_least(0.0))
          .option("random_seed", &PowerSGDOptions::random_seed, "seed of the initial random Q (the same on every rank)",
                  in_range(int64_t{0}, int64_t{4294967295}));
}

}  // namespace

const OptionSchema<PowerSGDOptions>& PowerSGDOptions::schema() {
  static const auto schema =
      common_powersgd_keys("--strategy ddp:comm_hook=powersgd")
          .option("min_compression_rate", &PowerSGDOptions::min_compression_rate,
                  "compress an n×m gradient only when (n+m)·rank·rate < n·m", greater_than(0.0))
          .option("batch_tensors_with_same_shape", &PowerSGDOptions::batch_tensors_with_same_shape,
                  "compress gradients of the same shape in one batched product");
  return schema;
}

const OptionSchema<PowerSGDOptions>& PowerSGDOptions::batched_schema() {
  static const auto schema = common_powersgd_keys("--strategy ddp:comm_hook=batched_powersgd");
  return schema;
}

void PowerSGDOptions::validate() const {
  schema().validate(*this);
  check<ConfigurationError>(
      start_powersgd_iter > 1 || (!use_error_feedback && !warm_start),
      "--strategy ddp:comm_hook=powersgd: expected start_powersgd_iter > 1 with error feedback or "
      "warm start (DDP rebuilds its buckets after the first iteration, which would invalidate "
      "their per-bucket state), got ",
      start_powersgd_iter, "; raise start_powersgd_iter or set use_error_feedback=false,warm_start=false");
}

PowerSGDHookBase::PowerSGDHookBase(Communicator& communicator, PowerSGDOptions options)
    : communicator_(communicator), options_(options), rng_(static_cast<uint32_t>(options.random_seed)) {
  options_.validate();
}

CollectiveHandle PowerSGDHookBase::run(GradBucket& bucket) {
  const bool compressing = iteration_ >= options_.start_powersgd_iter;
  // Every bucket of an iteration sees the same count; it advances with the last one.
  if (bucket.is_last) ++iteration_;
  if (!compressing) {
    bucket.buffer.div_(static_cast<double>(communicator_.size()));
    return communicator_.all_reduce_async(bucket.buffer, ReduceOp::Sum);
  }
  return compress(bucket);
}

torch::Tensor PowerSGDHookBase::add_error_feedback(int64_t bucket, torch::Tensor& input) {
  if (!options_.use_error_feedback) return {};
  auto found = error_.find(bucket);
  if (found != error_.end() && found->second.numel() == input.numel()) {
    input.add_(found->second);
  } else {
    error_[bucket] = torch::zeros_like(input);
  }
  return input.clone();
}

void PowerSGDHookBase::finish(int64_t bucket, const torch::Tensor& input_with_error,
                              const torch::Tensor& decompressed) {
  if (options_.use_error_feedback) error_[bucket] = input_with_error - decompressed;
  if (!options_.warm_start) {
    p_memory_.clear();
    q_memory_.clear();
  }
}

namespace {

StateDict by_bucket(const std::map<int64_t, torch::Tensor>& memories) {
  StateDict state;
  for (const auto& [bucket, tensor] : memories) state.set(std::to_string(bucket), tensor);
  return state;
}

std::map<int64_t, torch::Tensor> from_buckets(const StateDict& state) {
  std::map<int64_t, torch::Tensor> memories;
  for (const auto& key : state.keys()) memories[std::stoll(key)] = state.get_tensor(key).clone();
  return memories;
}

}  // namespace

StateDict PowerSGDHookBase::state_dict() const {
  StateDict state;
  state.set("iteration", iteration_);
  state.set("rng", rng_.save());
  state.set("bucket_numel", bucket_numel_);
  state.set("error", by_bucket(error_));
  state.set("p", by_bucket(p_memory_));
  state.set("q", by_bucket(q_memory_));
  return state;
}

void PowerSGDHookBase::load_state_dict(const StateDict& state) {
  iteration_ = state.get_int("iteration");
  rng_.load(state.get_string("rng"));
  error_.clear();
  p_memory_.clear();
  q_memory_.clear();
  if (state.get_ints("bucket_numel") != bucket_numel_) {
    if (communicator_.rank() == 0 && !state.child("p").empty()) {
      warn(name() + ": the checkpoint's error feedback and P/Q memories were saved for other buckets; they restart "
           "(the first compressed iteration starts from a fresh random Q)");
    }
    return;
  }
  error_ = from_buckets(state.child("error"));
  p_memory_ = from_buckets(state.child("p"));
  q_memory_ = from_buckets(state.child("q"));
}

void PowerSGDHookBase::on_buckets_rebuilt(const BucketLayout& layout) {
  bucket_numel_ = layout.numel;
  error_.clear();
  p_memory_.clear();
  q_memory_.clear();
}

// ---------------------------------------------------------------------------------------------
// powerSGD_hook

namespace {

// One batched product: `matrices` [batch, n, m] (views of the bucket, or a stack of copies), and
// its factors' views into the bucket's P and Q memories.
struct Factor {
  torch::Tensor matrices, p, q;
  std::vector<torch::Tensor> stacked_from;  // the gradients a stack copied (written back at the end)
};

}  // namespace

CollectiveHandle PowerSGDHook::compress(GradBucket& bucket) {
  const int64_t index = bucket.index;
  torch::Tensor input = bucket.buffer;
  const auto options = input.options();
  const double world = static_cast<double>(communicator_.size());
  const torch::Tensor input_with_error = add_error_feedback(index, input);

  // Which gradients are worth compressing; the rest travel as one flat buffer.
  std::vector<torch::Tensor> compressible, uncompressed;
  int64_t p_numel = 0, q_numel = 0;
  for (const auto& gradient : gradient_views(bucket)) {
    const auto matrix = gradient.dim() == 0 ? gradient.view({1, 1}) : gradient.view({gradient.size(0), -1});
    const int64_t n = matrix.size(0), m = matrix.size(1);
    const int64_t rank = std::min({n, m, options_.matrix_approximation_rank});
    if (worth_compressing(n, m, rank, options_.min_compression_rate)) {
      compressible.push_back(matrix);
      p_numel += n * rank;
      q_numel += m * rank;
    } else {
      uncompressed.push_back(gradient);
    }
  }
  std::vector<torch::Tensor> flat_parts;
  for (const auto& t : uncompressed) flat_parts.push_back(t.reshape({-1}));
  const torch::Tensor flat = flat_parts.empty() ? torch::empty({0}, options) : torch::cat(flat_parts);

  const bool randomize = !options_.warm_start || !p_memory_.count(index);
  if (randomize) {
    p_memory_[index] = torch::empty({p_numel}, options);
    q_memory_[index] = torch::empty({q_numel}, options);
  }

  // Same-shaped matrices together, shapes in order of first appearance (PyTorch's grouping, which
  // fixes where each factor lives in the memories and which random values it gets).
  std::vector<std::pair<std::vector<int64_t>, std::vector<torch::Tensor>>> by_shape;
  for (const auto& matrix : compressible) {
    const auto shape = matrix.sizes().vec();
    auto group = std::find_if(by_shape.begin(), by_shape.end(), [&](const auto& g) { return g.first == shape; });
    if (group == by_shape.end()) group = by_shape.insert(by_shape.end(), {shape, {}});
    group->second.push_back(matrix);
  }
  auto factors = std::make_shared<std::vector<Factor>>();
  int64_t p_offset = 0, q_offset = 0;
  auto add_factor = [&](torch::Tensor matrices, std::vector<torch::Tensor> stacked_from) {
    const int64_t batch = matrices.size(0), n = matrices.size(1), m = matrices.size(2);
    const int64_t rank = std::min({n, m, options_.matrix_approximation_rank});
    Factor f{std::move(matrices), p_memory_[index].narrow(0, p_offset, batch * n * rank).view({batch, n, rank}),
             q_memory_[index].narrow(0, q_offset, batch * m * rank).view({batch, m, rank}), std::move(stacked_from)};
    p_offset += batch * n * rank;
    q_offset += batch * m * rank;
    factors->push_back(std::move(f));
  };
  for (auto& [shape, matrices] : by_shape) {
    if (options_.batch_tensors_with_same_shape && matrices.size() > 1) {
      add_factor(torch::stack(matrices), matrices);
    } else {
      for (const auto& matrix : matrices) add_factor(matrix.unsqueeze(0), {});
    }
  }

  if (randomize) {
    auto generator = seeded_cpu_generator(rng_.randint(1'000'000'000));
    for (auto& f : *factors) {
      f.q.copy_(torch::randn(f.q.sizes(), generator, torch::TensorOptions().dtype(options.dtype())));
      orthogonalize(f.q, options_.orthogonalization_epsilon);
    }
  } else {
    for (auto& f : *factors) orthogonalize(f.q, options_.orthogonalization_epsilon);
  }
  for (auto& f : *factors) torch::bmm_out(f.p, f.matrices, f.q);

  Communicator& communicator = communicator_;
  const double epsilon = options_.orthogonalization_epsilon;
  torch::Tensor p_memory = p_memory_[index], q_memory = q_memory_[index];
  CollectiveHandle uncompressed_sum = flat.numel() > 0 ? communicator.all_reduce_async(flat, ReduceOp::Sum)
                                                       : CollectiveHandle();
  return std::move(uncompressed_sum)
      .then_collective([&communicator, flat, uncompressed, p_memory, world](const torch::Tensor&) {
        flat.div_(world);
        int64_t offset = 0;
        for (const auto& t : uncompressed) {
          t.copy_(flat.narrow(0, offset, t.numel()).view(t.sizes()));
          offset += t.numel();
        }
        return communicator.all_reduce_async(p_memory, ReduceOp::Sum);
      })
      .then_collective([&communicator, factors, q_memory, epsilon](const torch::Tensor&) {
        for (auto& f : *factors) orthogonalize(f.p, epsilon);
        for (auto& f : *factors) torch::bmm_out(f.q, f.matrices.transpose(1, 2), f.p);
        return communicator.all_reduce_async(q_memory, ReduceOp::Sum);
      })
      .then([this, index, factors, q_memory, input, input_with_error, world](const torch::Tensor&) {
        q_memory.div_(world);
        for (auto& f : *factors) {
          torch::bmm_out(f.matrices, f.p, f.q.transpose(1, 2));
          for (size_t i = 0; i < f.stacked_from.size(); ++i)
            f.stacked_from[i].copy_(f.matrices[static_cast<int64_t>(i)]);
        }
        finish(index, input_with_error, input);
        return input;
      });
}

// ---------------------------------------------------------------------------------------------
// batched_powerSGD_hook

CollectiveHandle BatchedPowerSGDHook::compress(GradBucket& bucket) {
  const int64_t index = bucket.index;
  torch::Tensor input = bucket.buffer;
  const auto options = input.options();
  const double world = static_cast<double>(communicator_.size());
  const int64_t length = input.numel();
  const auto side = static_cast<int64_t>(std::ceil(std::sqrt(static_cast<double>(length))));
  // PyTorch resizes the bucket itself; a zero-padded copy is the same numbers.
  torch::Tensor padded = torch::zeros({side * side}, options);
  padded.narrow(0, 0, length).copy_(input);
  const torch::Tensor padded_with_error = add_error_feedback(index, padded);
  torch::Tensor matrix = padded.view({side, side});
  // PyTorch does not clamp the rank here; a rank above the side could not be orthogonalized.
  const int64_t rank = std::min(side, options_.matrix_approximation_rank);
  if (!options_.warm_start || !p_memory_.count(index)) {
    p_memory_[index] = torch::empty({side, rank}, options);
    q_memory_[index] = torch::randn({side, rank}, seeded_cpu_generator(rng_.randint(1'000'000'000)),
                                    torch::TensorOptions().dtype(options.dtype()))
                           .to(options.device());
  }
  torch::Tensor p = p_memory_[index], q = q_memory_[index];
  auto q_batch = q.unsqueeze(0);
  orthogonalize(q_batch, options_.orthogonalization_epsilon);
  torch::matmul_out(p, matrix, q);

  Communicator& communicator = communicator_;
  const double epsilon = options_.orthogonalization_epsilon;
  return communicator.all_reduce_async(p, ReduceOp::Sum)
      .then_collective([&communicator, matrix, p, q, epsilon](const torch::Tensor&) mutable {
        auto p_batch = p.unsqueeze(0);
        orthogonalize(p_batch, epsilon);
        torch::matmul_out(q, matrix.t(), p);
        return communicator.all_reduce_async(q, ReduceOp::Sum);
      })
      .then([this, index, matrix, p, q, padded, padded_with_error, input, length, world](const torch::Tensor&) mutable {
        q.div_(world);
        torch::matmul_out(matrix, p, q.t());
        finish(index, padded_with_error, padded);
        input.copy_(padded.narrow(0, 0, length));
        return input;
      });
}

}  // namespace volt::ddp
