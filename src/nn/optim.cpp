// SGD and AdamW with PyTorch's update rules, global-norm gradient clipping, and the warm-up +
// cosine learning-rate schedule.
#include "qkv/nn/optim.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <numbers>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/thread_budget.hpp"
#include "kernels/cpu/optimizer_update.hpp"
#include "qkv/autograd/ops.hpp"
#include "qkv/error.hpp"
#include "qkv/system.hpp"

namespace qkv::nn {

namespace {

// parameter [...] with its gradient [...]. Calls update(n, p, g) for every element n of the
// parameter, with p its value (written back in the parameter's dtype) and g its gradient, both as
// double.
template <class Update>
void update_elements(const Var& parameter, Update update) {
  const Tensor grad = parameter.grad().contiguous();
  const Tensor value = parameter.value();
  if (!value.is_contiguous()) throw Error("parameter", "contiguous", value.describe());
  const auto run = [&](auto* p) {
    using T = std::remove_pointer_t<decltype(p)>;
    const T* g = grad.data_as<T>();
    for (std::int64_t n = 0; n < value.numel(); ++n) {
      double x = p[n];
      update(n, x, static_cast<double>(g[n]));
      p[n] = static_cast<T>(x);
    }
  };
  if (value.dtype() == DType::f64) {
    run(value.data_as<double>());
  } else if (value.dtype() == DType::f32) {
    run(value.data_as<float>());
  } else {
    throw Error("parameter", "f32 or f64", std::string(dtype_name(value.dtype())));
  }
}

// parameter [...] with its gradient [...]: fn(p, g) with pointers to the parameter's values
// (written in place) and to its gradient's, both of the parameter's type (f32 or f64).
template <class Fn>
void with_data(const Var& parameter, Fn fn) {
  const Tensor value = parameter.value();
  if (!value.is_contiguous()) throw Error("parameter", "contiguous", value.describe());
  const Tensor grad = parameter.grad().contiguous();
  if (grad.dtype() != value.dtype()) {
    throw Error("parameter's gradient", std::string(dtype_name(value.dtype())),
                std::string(dtype_name(grad.dtype())));
  }
  if (value.dtype() == DType::f64) {
    fn(value.data_as<double>(), grad.data_as<double>());
  } else if (value.dtype() == DType::f32) {
    fn(value.data_as<float>(), grad.data_as<float>());
  } else {
    throw Error("parameter", "f32 or f64", std::string(dtype_name(value.dtype())));
  }
}

bool has_grad(const Var& parameter) { return parameter.grad().defined(); }

void check_parameters(const std::vector<Var>& parameters) {
  for (const Var& p : parameters) {
    if (!p.defined() || !p.is_leaf() || !p.requires_grad()) {
      throw Error("parameters", "leaf Vars that require grad", "another Var");
    }
  }
}

std::string num(double x) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", x);
  return text;
}

// The checks of torch.optim ("Invalid learning rate", ...), NaN refused too.
void expect_at_least_zero(const char* argument, double x, const char* what = "a number") {
  if (!(x >= 0)) throw Error(argument, std::string(what) + " >= 0", num(x));
}

void expect_beta(const char* argument, double beta) {
  if (!(beta >= 0 && beta < 1)) throw Error(argument, "a number in [0, 1)", num(beta));
}

}  // namespace

Sgd::Sgd(std::vector<Var> parameters, const SgdOptions& options)
    : parameters_(std::move(parameters)), options_(options), momentum_(parameters_.size()) {
  check_parameters(parameters_);
  expect_at_least_zero("options.lr", options.lr, "a learning rate");
  expect_at_least_zero("options.momentum", options.momentum);
  expect_at_least_zero("options.weight_decay", options.weight_decay);
  if (options.nesterov && (options.momentum <= 0 || options.dampening != 0)) {
    throw Error("nesterov", "momentum > 0 and dampening 0", "other values");
  }
}

void Sgd::step() {
  const SgdOptions o = options_;
  for (std::size_t i = 0; i < parameters_.size(); ++i) {
    if (!has_grad(parameters_[i])) continue;
    std::vector<double>& buf = momentum_[i];
    const bool first = buf.empty();
    if (o.momentum != 0 && first) buf.resize(static_cast<std::size_t>(parameters_[i].numel()));
    update_elements(parameters_[i], [&](std::int64_t n, double& p, double grad) {
      double g = grad + o.weight_decay * p;
      if (o.momentum != 0) {
        buf[n] = first ? g : o.momentum * buf[n] + (1 - o.dampening) * g;
        g = o.nesterov ? g + o.momentum * buf[n] : buf[n];
      }
      p -= o.lr * g;
    });
  }
}

void Sgd::zero_grad() {
  for (Var& p : parameters_) p.zero_grad();
}

AdamW::AdamW(std::vector<Var> parameters, const AdamWOptions& options)
    : parameters_(std::move(parameters)),
      options_(options),
      m32_(parameters_.size()),
      v32_(parameters_.size()),
      m64_(parameters_.size()),
      v64_(parameters_.size()) {
  check_parameters(parameters_);
  expect_at_least_zero("options.lr", options.lr, "a learning rate");
  expect_beta("options.beta1", options.beta1);
  expect_beta("options.beta2", options.beta2);
  expect_at_least_zero("options.eps", options.eps);
  expect_at_least_zero("options.weight_decay", options.weight_decay);
}

void AdamW::step() {
  const AdamWOptions o = options_;
  ++steps_;
  const double t = static_cast<double>(steps_);
  kernels::cpu::AdamWConstants c;
  c.decay = 1 - o.lr * o.weight_decay;
  c.beta1 = o.beta1;
  c.beta2 = o.beta2;
  c.step_size = o.lr / (1 - std::pow(o.beta1, t));
  c.bias_correction2_sqrt = std::sqrt(1 - std::pow(o.beta2, t));
  c.eps = o.eps;
  // Parameters are independent: the threads take them one at a time (errors, from a parameter
  // that is not contiguous or f32/f64, are checked before any is updated).
  std::vector<std::size_t> todo;
  for (std::size_t i = 0; i < parameters_.size(); ++i) {
    if (!has_grad(parameters_[i])) continue;
    const auto n = static_cast<std::size_t>(parameters_[i].numel());
    with_data(parameters_[i], [&](const auto* p, const auto*) {
      if constexpr (std::is_same_v<std::remove_cv_t<std::remove_pointer_t<decltype(p)>>, float>) {
        m32_[i].resize(n);
        v32_[i].resize(n);
      } else {
        m64_[i].resize(n);
        v64_[i].resize(n);
      }
    });
    todo.push_back(i);
  }
  const detail::ThreadShare threads(num_threads());
#pragma omp parallel for schedule(dynamic, 1)
  for (std::size_t k = 0; k < todo.size(); ++k) {
    const std::size_t i = todo[k];
    with_data(parameters_[i], [&](auto* p, const auto* g) {
      const std::int64_t n = parameters_[i].numel();
      if constexpr (std::is_same_v<std::remove_pointer_t<decltype(p)>, float>) {
        kernels::cpu::adamw_update(p, g, m32_[i].data(), v32_[i].data(), n, c);
      } else {
        kernels::cpu::adamw_update(p, g, m64_[i].data(), v64_[i].data(), n, c);
      }
    });
  }
}

void AdamW::zero_grad() {
  for (Var& p : parameters_) p.zero_grad();
}

double clip_grad_norm(const std::vector<Var>& parameters, double max_norm) {
  expect_at_least_zero("max_norm", max_norm);
  // Each parameter's sum of squares, f32 and f64 ones on the threads one at a time (on one
  // thread, 0.9% of a training step of qkv demo's translator while the other waited: perf, 2
  // threads of the AMD EPYC Zen 5 VM, 2026-11-29), then added in the parameters' order, so the
  // norm does not depend on the thread count.
  const std::size_t count = parameters.size();
  std::vector<Tensor> grads(count);
  std::vector<double> squares(count, 0.0);
  for (std::size_t i = 0; i < count; ++i) {
    if (!has_grad(parameters[i])) continue;
    grads[i] = parameters[i].grad().contiguous();
    if (grads[i].dtype() != DType::f32 && grads[i].dtype() != DType::f64) {
      for (const double x : grads[i].to_vector()) squares[i] += x * x;
    }
  }
  {
    const detail::ThreadShare threads(num_threads());
#pragma omp parallel for schedule(dynamic, 1)
    for (std::size_t i = 0; i < count; ++i) {
      const Tensor& g = grads[i];
      if (!g.defined()) continue;
      if (g.dtype() == DType::f64) {
        squares[i] = kernels::cpu::sum_of_squares(g.data_as<double>(), g.numel());
      } else if (g.dtype() == DType::f32) {
        squares[i] = kernels::cpu::sum_of_squares(g.data_as<float>(), g.numel());
      }
    }
  }
  double total = 0;
  for (const double s : squares) total += s;
  const double norm = std::sqrt(total);
  const double coefficient = max_norm / (norm + 1e-6);
  if (coefficient >= 1) return norm;
  std::vector<Tensor> in_place(count);  // gradients scaled where they lie, sharing their storage
  for (std::size_t i = 0; i < count; ++i) {
    if (!has_grad(parameters[i])) continue;
    Tensor grad = parameters[i].grad();
    const bool vector_pass =
        grad.is_contiguous() && (grad.dtype() == DType::f64 || grad.dtype() == DType::f32);
    if (vector_pass) {
      in_place[i] = grad;
      continue;
    }
    const std::vector<double> g = grad.to_vector();
    std::vector<double> scaled(g.size());
    for (std::size_t n = 0; n < g.size(); ++n) scaled[n] = g[n] * coefficient;
    grad.copy_from(Tensor::from_values(grad.shape(), scaled, DType::f64));
  }
  const detail::ThreadShare threads(num_threads());
#pragma omp parallel for schedule(dynamic, 1)
  for (std::size_t i = 0; i < count; ++i) {
    Tensor& g = in_place[i];
    if (!g.defined()) continue;
    if (g.dtype() == DType::f64) {
      kernels::cpu::scale_values(g.data_as<double>(), g.numel(), coefficient);
    } else {
      kernels::cpu::scale_values(g.data_as<float>(), g.numel(), coefficient);
    }
  }
  return norm;
}

GradScaler::GradScaler(const GradScalerOptions& options)
    : options_(options), scale_(options.init_scale) {
  if (!(options.init_scale > 0)) throw Error("init_scale", "> 0", num(options.init_scale));
  if (!(options.growth_factor > 1)) throw Error("growth_factor", "> 1", num(options.growth_factor));
  if (!(options.backoff_factor > 0 && options.backoff_factor < 1)) {
    throw Error("backoff_factor", "in (0, 1)", num(options.backoff_factor));
  }
  if (options.growth_interval < 1) {
    throw Error("growth_interval", ">= 1", std::to_string(options.growth_interval));
  }
}

Var GradScaler::scale(const Var& loss) const { return autograd::mul(loss, scale_); }

bool GradScaler::unscale(const std::vector<Var>& parameters) const {
  bool finite = true;
  for (const Var& p : parameters) {
    if (!p.defined() || !has_grad(p)) continue;
    Tensor grad = p.grad();  // shares the gradient's storage
    std::vector<double> g = grad.to_vector();
    for (double& x : g) {
      x /= scale_;
      finite = finite && std::isfinite(x);
    }
    grad.copy_from(Tensor::from_values(grad.shape(), g, DType::f64));
  }
  return finite;
}

void GradScaler::update(bool found_inf) {
  if (found_inf) {
    scale_ *= options_.backoff_factor;
    good_steps_ = 0;
  } else if (++good_steps_ == options_.growth_interval) {
    scale_ *= options_.growth_factor;
    good_steps_ = 0;
  }
}

double warmup_cosine_lr(std::int64_t step, double base_lr, std::int64_t warmup_steps,
                        std::int64_t total_steps, double min_lr) {
  if (warmup_steps < 0) throw Error("warmup_steps", ">= 0", std::to_string(warmup_steps));
  if (total_steps <= warmup_steps) {
    throw Error("total_steps", "> warmup_steps " + std::to_string(warmup_steps),
                std::to_string(total_steps));
  }
  if (step < warmup_steps) {
    return base_lr * static_cast<double>(step) / static_cast<double>(warmup_steps);
  }
  const double progress = std::min(1.0, static_cast<double>(step - warmup_steps) /
                                            static_cast<double>(total_steps - warmup_steps));
  return min_lr + (base_lr - min_lr) * 0.5 * (1 + std::cos(std::numbers::pi * progress));
}

}  // namespace qkv::nn
