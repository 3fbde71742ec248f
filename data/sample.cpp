#include "data/sample.h"

#include "core/error.h"

namespace volt {
namespace {

std::string describe(const torch::Tensor& t) {
  if (!t.defined()) return "no tensor";
  std::ostringstream out;
  out << "shape " << t.sizes() << " and dtype " << t.dtype();
  return out.str();
}

// Stacks one field of every sample, after checking that each has it with sample 0's shape and dtype.
torch::Tensor stack_field(const std::vector<const torch::Tensor*>& field, const std::string& name, bool pinned) {
  const torch::Tensor& first = *field.front();
  if (!first.defined()) {
    for (size_t i = 1; i < field.size(); ++i) {
      check<DataError>(!field[i]->defined(), "default_collate: sample 0 of the batch has no ", name, " but sample ", i,
                       " has one (", describe(*field[i]), "); give every sample the same fields");
    }
    return {};
  }
  for (size_t i = 1; i < field.size(); ++i) {
    const torch::Tensor& t = *field[i];
    check<DataError>(t.defined() && t.sizes() == first.sizes() && t.dtype() == first.dtype(), "default_collate: ",
                     name, " of sample ", i, " of the batch has ", describe(t), ", sample 0's has ", describe(first),
                     "; resize in the dataset's transform, or pass a collate function that pads");
  }
  std::vector<int64_t> shape{static_cast<int64_t>(field.size())};
  shape.insert(shape.end(), first.sizes().begin(), first.sizes().end());
  auto options = first.options();
  if (pinned && first.is_cpu()) options = options.pinned_memory(true);
  torch::Tensor out = torch::empty(shape, options);
  for (size_t i = 0; i < field.size(); ++i) out[static_cast<int64_t>(i)].copy_(*field[i]);
  return out;
}

Batch collate(std::vector<Sample>&& samples, bool pinned) {
  check<DataError>(!samples.empty(), "default_collate: expected at least one sample, got none");
  auto gather = [&](auto member) {
    std::vector<const torch::Tensor*> field;
    field.reserve(samples.size());
    for (const Sample& s : samples) field.push_back(&(s.*member));
    return field;
  };
  Batch batch;
  batch.input = stack_field(gather(&Sample::input), "input", pinned);
  batch.target = stack_field(gather(&Sample::target), "target", pinned);
  for (const auto& [key, value] : samples.front().extras) {
    std::vector<const torch::Tensor*> field;
    for (size_t i = 0; i < samples.size(); ++i) {
      auto found = samples[i].extras.find(key);
      check<DataError>(found != samples[i].extras.end(), "default_collate: sample ", i,
                       " of the batch has no extra '", key, "' that sample 0 has; give every sample the same extras");
      field.push_back(&found->second);
    }
    batch.extras.emplace(key, stack_field(field, "extra '" + key + "'", pinned));
  }
  for (size_t i = 1; i < samples.size(); ++i) {
    check<DataError>(samples[i].extras.size() == samples.front().extras.size(), "default_collate: sample ", i,
                     " of the batch has ", samples[i].extras.size(), " extras, sample 0 has ",
                     samples.front().extras.size(), "; give every sample the same extras");
  }
  return batch;
}

}  // namespace

Batch default_collate(std::vector<Sample>&& samples) { return collate(std::move(samples), /*pinned=*/false); }

Batch default_collate_pinned(std::vector<Sample>&& samples) { return collate(std::move(samples), /*pinned=*/true); }

}  // namespace volt
