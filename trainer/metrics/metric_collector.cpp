#include "trainer/metrics/metric_collector.h"

#include "core/error.h"

namespace volt {
namespace {

bool same_options(const LogOptions& a, const LogOptions& b) {
  return a.on_step == b.on_step && a.on_epoch == b.on_epoch && a.reduce_fx == b.reduce_fx &&
         a.sync_dist == b.sync_dist;
}

void emit(MetricValues& out, const std::string& name, const torch::Tensor& value, const LogOptions& options) {
  out.callback[name] = value;
  if (options.logger) out.logger[name] = value;
  if (options.prog_bar) out.prog_bar[name] = value;
}

}  // namespace

torch::Tensor MetricCollector::accumulate(const torch::Tensor& total, const torch::Tensor& v, double weight,
                                          ReduceFx reduce_fx) {
  if (!total.defined()) return reduce_fx == ReduceFx::Mean ? v * weight : v;
  const auto t = total.to(v.device());
  switch (reduce_fx) {
    case ReduceFx::Mean: return t + v * weight;
    case ReduceFx::Sum: return t + v;
    case ReduceFx::Max: return torch::maximum(t, v);
    case ReduceFx::Min: return torch::minimum(t, v);
  }
  VOLT_INTERNAL_ASSERT(false, "reduce_fx ", static_cast<int>(reduce_fx));
  return {};
}

MetricCollector::MetricCollector(SyncFn sync) : sync_(std::move(sync)) {}

void MetricCollector::reset(RunningStage stage) {
  stage_ = stage;
  in_step_ = false;
  entries_.clear();
}

void MetricCollector::set_in_step(bool in_step, int64_t batch_size) {
  in_step_ = in_step;
  batch_size_ = batch_size;
}

void MetricCollector::begin_batch() {
  for (auto& [name, entry] : entries_) entry.fresh = false;
}

void MetricCollector::log(const std::string& name, const torch::Tensor& value,
                          const LogOptions& given) {
  check<ConfigurationError>(!name.empty(), "log: expected a metric name, got an empty string");
  check<ConfigurationError>(stage_ != RunningStage::None, "log('", name,
                            "'): called outside fit/validate/test; log from a step or hook");
  check<ConfigurationError>(value.defined() && value.numel() == 1, "log('", name,
                            "'): expected a scalar, got a tensor of shape ",
                            value.defined() ? value.sizes() : torch::IntArrayRef{});
  if (recording_ != nullptr) {
    recording_->push_back({name, value.detach(), given});
    return;
  }
  LogOptions options = given;
  const bool training_step = stage_ == RunningStage::Training && in_step_;
  if (!options.on_step) options.on_step = training_step;
  if (!options.on_epoch) options.on_epoch = !training_step;
  check<ConfigurationError>(*options.on_step || *options.on_epoch, "log('", name,
                            "'): on_step and on_epoch are both false, so the value goes nowhere");
  check<ConfigurationError>(!options.batch_size || *options.batch_size >= 1, "log('", name,
                            "'): expected batch_size >= 1, got ", options.batch_size.value_or(0));

  auto [it, inserted] = entries_.try_emplace(name);
  Entry& entry = it->second;
  if (inserted) {
    entry.options = options;
  } else {
    check<ConfigurationError>(same_options(entry.options, options), "log('", name,
                              "'): logged again in this loop with different on_step/on_epoch/"
                              "reduce_fx/sync_dist; use one set of options per name");
    entry.options.prog_bar = options.prog_bar;
    entry.options.logger = options.logger;
  }

  const auto v = value.detach().reshape({}).to(torch::kDouble);
  entry.last = v;
  entry.fresh = true;
  if (!*options.on_epoch) return;
  const double weight = in_step_ ? static_cast<double>(options.batch_size.value_or(batch_size_)) : 1.0;
  entry.total = accumulate(entry.total, v, weight, options.reduce_fx);
  if (options.reduce_fx == ReduceFx::Mean) entry.weight += weight;
}

MetricValues MetricCollector::step_values() const {
  MetricValues out;
  for (const auto& [name, entry] : entries_) {
    if (!*entry.options.on_step || !entry.fresh) continue;
    const auto value = entry.options.sync_dist ? sync_(entry.last, ReduceOp::Mean) : entry.last;
    emit(out, *entry.options.on_epoch ? name + "_step" : name, value, entry.options);
  }
  return out;
}

MetricValues MetricCollector::epoch_values() const {
  MetricValues out;
  for (const auto& [name, entry] : entries_) {
    if (!*entry.options.on_epoch || !entry.total.defined()) continue;
    torch::Tensor value;
    if (entry.options.reduce_fx == ReduceFx::Mean) {
      if (entry.options.sync_dist) {
        const auto& total = entry.total;
        auto pair = sync_(torch::stack({total, torch::full({}, entry.weight, total.options())}), ReduceOp::Sum);
        value = pair[0] / pair[1];
      } else {
        value = entry.total / entry.weight;
      }
    } else if (entry.options.sync_dist) {
      static const std::map<ReduceFx, ReduceOp> ops{
          {ReduceFx::Sum, ReduceOp::Sum}, {ReduceFx::Max, ReduceOp::Max}, {ReduceFx::Min, ReduceOp::Min}};
      value = sync_(entry.total, ops.at(entry.options.reduce_fx));
    } else {
      value = entry.total;
    }
    if (*entry.options.on_step) {
      emit(out, name + "_epoch", value, entry.options);
      out.callback[name] = value;
    } else {
      emit(out, name, value, entry.options);
    }
  }
  return out;
}

StateDict MetricCollector::state_dict() const {
  StateDict state;
  state.set("stage", static_cast<int64_t>(stage_));
  StateDict entries;
  for (const auto& [name, entry] : entries_) {
    StateDict e;
    e.set("prog_bar", entry.options.prog_bar);
    e.set("logger", entry.options.logger);
    e.set("on_step", *entry.options.on_step);
    e.set("on_epoch", *entry.options.on_epoch);
    e.set("reduce_fx", static_cast<int64_t>(entry.options.reduce_fx));
    e.set("sync_dist", entry.options.sync_dist);
    if (entry.total.defined()) e.set("total", entry.total.cpu());
    e.set("weight", entry.weight);
    entries.set(name, e);
  }
  state.set("entries", entries);
  return state;
}

void MetricCollector::load_state_dict(const StateDict& state) {
  const int64_t stage = state.get_int("stage");
  check<CheckpointError>(stage >= 0 && stage <= static_cast<int64_t>(RunningStage::Predicting),
                         "checkpoint: metric collector stage ", stage, " is not a stage; the checkpoint is damaged");
  std::map<std::string, Entry> entries;
  const StateDict saved = state.child("entries");
  for (const auto& name : saved.keys()) {
    const StateDict e = saved.child(name);
    Entry entry;
    entry.options.prog_bar = e.get_bool("prog_bar");
    entry.options.logger = e.get_bool("logger");
    entry.options.on_step = e.get_bool("on_step");
    entry.options.on_epoch = e.get_bool("on_epoch");
    const int64_t reduce = e.get_int("reduce_fx");
    check<CheckpointError>(reduce >= 0 && reduce <= static_cast<int64_t>(ReduceFx::Min), "checkpoint: metric '", name,
                           "' has reduce_fx ", reduce, "; the checkpoint is damaged");
    entry.options.reduce_fx = static_cast<ReduceFx>(reduce);
    entry.options.sync_dist = e.get_bool("sync_dist");
    if (e.contains("total")) entry.total = e.get_tensor("total").to(torch::kDouble).reshape({});
    entry.weight = e.get_double("weight");
    entries.emplace(name, std::move(entry));
  }
  stage_ = static_cast<RunningStage>(stage);
  in_step_ = false;
  entries_ = std::move(entries);
}

}  // namespace volt
