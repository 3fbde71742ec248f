// LibTorch's optimizers under PyTorch's names: each group's options and each parameter's state as
// torch.optim's state_dict() holds them.
#include "checkpoint/optimizer_state_codec.h"

namespace volt {
namespace {

namespace o = torch::optim;

// Adam and AdamW have the same fields under different types.
template <typename Optimizer, typename Options, typename ParamState>
OptimizerStateCodec adam_like(const char* name) {
  return optimizer_state_codec<Optimizer, Options, ParamState>(
      name,
      [](const Options& opt, StateDict& g) {
        g.set("lr", opt.lr());
        g.set("betas", pair_value(opt.betas()));
        g.set("eps", opt.eps());
        g.set("weight_decay", opt.weight_decay());
        g.set("amsgrad", opt.amsgrad());
      },
      [](Options& opt, const StateDict& g) {
        opt.lr(g.get_double("lr")).betas(take_pair(g, "betas")).eps(g.get_double("eps"));
        opt.weight_decay(g.get_double("weight_decay")).amsgrad(g.get_bool("amsgrad"));
      },
      [](const ParamState& p, StateDict& s) {
        put_step(s, p.step());
        put_state_tensor(s, "exp_avg", p.exp_avg());
        put_state_tensor(s, "exp_avg_sq", p.exp_avg_sq());
        put_state_tensor(s, "max_exp_avg_sq", p.max_exp_avg_sq());
      },
      [](ParamState& p, const StateDict& s, const torch::Tensor& param, const ParameterContext& c) {
        p.step(take_step(s, c));
        p.exp_avg(take_state_tensor(s, "exp_avg", param, c));
        p.exp_avg_sq(take_state_tensor(s, "exp_avg_sq", param, c));
        p.max_exp_avg_sq(take_state_tensor(s, "max_exp_avg_sq", param, c, /*required=*/false));
      });
}

OptimizerStateCodec sgd() {
  return optimizer_state_codec<o::SGD, o::SGDOptions, o::SGDParamState>(
      "SGD",
      [](const o::SGDOptions& opt, StateDict& g) {
        g.set("lr", opt.lr());
        g.set("momentum", opt.momentum());
        g.set("dampening", opt.dampening());
        g.set("weight_decay", opt.weight_decay());
        g.set("nesterov", opt.nesterov());
      },
      [](o::SGDOptions& opt, const StateDict& g) {
        opt.lr(g.get_double("lr")).momentum(g.get_double("momentum")).dampening(g.get_double("dampening"));
        opt.weight_decay(g.get_double("weight_decay")).nesterov(g.get_bool("nesterov"));
      },
      [](const o::SGDParamState& p, StateDict& s) { put_state_tensor(s, "momentum_buffer", p.momentum_buffer()); },
      [](o::SGDParamState& p, const StateDict& s, const torch::Tensor& param, const ParameterContext& c) {
        p.momentum_buffer(take_state_tensor(s, "momentum_buffer", param, c, /*required=*/false));
      });
}

OptimizerStateCodec rmsprop() {
  return optimizer_state_codec<o::RMSprop, o::RMSpropOptions, o::RMSpropParamState>(
      "RMSprop",
      [](const o::RMSpropOptions& opt, StateDict& g) {
        g.set("lr", opt.lr());
        g.set("alpha", opt.alpha());
        g.set("eps", opt.eps());
        g.set("weight_decay", opt.weight_decay());
        g.set("momentum", opt.momentum());
        g.set("centered", opt.centered());
      },
      [](o::RMSpropOptions& opt, const StateDict& g) {
        opt.lr(g.get_double("lr")).alpha(g.get_double("alpha")).eps(g.get_double("eps"));
        opt.weight_decay(g.get_double("weight_decay")).momentum(g.get_double("momentum"));
        opt.centered(g.get_bool("centered"));
      },
      [](const o::RMSpropParamState& p, StateDict& s) {
        put_step(s, p.step());
        put_state_tensor(s, "square_avg", p.square_avg());
        put_state_tensor(s, "momentum_buffer", p.momentum_buffer());
        put_state_tensor(s, "grad_avg", p.grad_avg());
      },
      [](o::RMSpropParamState& p, const StateDict& s, const torch::Tensor& param, const ParameterContext& c) {
        p.step(take_step(s, c));
        p.square_avg(take_state_tensor(s, "square_avg", param, c));
        p.momentum_buffer(take_state_tensor(s, "momentum_buffer", param, c, /*required=*/false));
        p.grad_avg(take_state_tensor(s, "grad_avg", param, c, /*required=*/false));
      });
}

OptimizerStateCodec adagrad() {
  return optimizer_state_codec<o::Adagrad, o::AdagradOptions, o::AdagradParamState>(
      "Adagrad",
      [](const o::AdagradOptions& opt, StateDict& g) {
        g.set("lr", opt.lr());
        g.set("lr_decay", opt.lr_decay());
        g.set("weight_decay", opt.weight_decay());
        g.set("initial_accumulator_value", opt.initial_accumulator_value());
        g.set("eps", opt.eps());
      },
      [](o::AdagradOptions& opt, const StateDict& g) {
        opt.lr(g.get_double("lr")).lr_decay(g.get_double("lr_decay")).weight_decay(g.get_double("weight_decay"));
        opt.initial_accumulator_value(g.get_double("initial_accumulator_value")).eps(g.get_double("eps"));
      },
      [](const o::AdagradParamState& p, StateDict& s) {
        put_step(s, p.step());
        put_state_tensor(s, "sum", p.sum());
      },
      [](o::AdagradParamState& p, const StateDict& s, const torch::Tensor& param, const ParameterContext& c) {
        p.step(take_step(s, c));
        p.sum(take_state_tensor(s, "sum", param, c));
      });
}

}  // namespace

void register_builtin_optimizer_state_codecs(OptimizerStateCodecs& codecs) {
  codecs.add(sgd());
  codecs.add(adam_like<o::Adam, o::AdamOptions, o::AdamParamState>("Adam"));
  codecs.add(adam_like<o::AdamW, o::AdamWOptions, o::AdamWParamState>("AdamW"));
  codecs.add(rmsprop());
  codecs.add(adagrad());
}

}  // namespace volt
