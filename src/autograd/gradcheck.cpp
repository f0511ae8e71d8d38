// gradcheck: backward() against central differences in f64.
#include "qkv/autograd/gradcheck.hpp"

#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "qkv/error.hpp"
#include "qkv/philox.hpp"

namespace qkv::autograd {
namespace {

// L = sum(y * R) in long double, so that the differences of L are not lost to rounding.
long double weighted_sum(const Tensor& y, const std::vector<double>& r) {
  const std::vector<double> values = y.to_vector();
  long double sum = 0;
  for (std::size_t n = 0; n < values.size(); ++n) {
    sum += static_cast<long double>(values[n]) * r[n];
  }
  return sum;
}

// The row-major index of element n of shape.
Shape unravel(std::int64_t n, const Shape& shape) {
  Shape index(shape.size());
  for (std::size_t d = shape.size(); d-- > 0;) {
    index[d] = shape[d] == 0 ? 0 : n % shape[d];
    n = shape[d] == 0 ? 0 : n / shape[d];
  }
  return index;
}

}  // namespace

std::string GradcheckResult::describe() const {
  std::ostringstream s;
  s.precision(6);
  s << (ok ? "ok" : "FAILED") << ": " << elements << " elements, worst |analytic - numeric| / "
    << "(atol + rtol |numeric|) = " << worst_ratio << " at input " << input << " index "
    << shape_string(index) << " (analytic " << analytic << ", numeric " << numeric
    << "); worst absolute error " << worst_abs;
  return s.str();
}

GradcheckResult gradcheck(const GradcheckFunction& f, const std::vector<Tensor>& inputs,
                          const GradcheckOptions& options) {
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined() || inputs[i].dtype() != DType::f64) {
      throw Error("inputs[" + std::to_string(i) + "]", "an f64 tensor",
                  inputs[i].defined() ? inputs[i].describe() : "an undefined tensor");
    }
  }
  if (!(options.step > 0)) throw Error("step", "a positive step", std::to_string(options.step));
  // Private copies: the differences perturb them in place.
  std::vector<Tensor> x;
  for (const Tensor& t : inputs) x.push_back(t.clone());
  const auto evaluate = [&](bool requires_grad, std::vector<Var>& vars) {
    vars.clear();
    for (const Tensor& t : x) vars.emplace_back(t, requires_grad);
    return f(vars);
  };

  std::vector<Var> vars;
  const Var y = evaluate(true, vars);
  Generator generator(options.seed);
  const Tensor r = Tensor::randn(y.shape(), generator, DType::f64);
  const std::vector<double> weights = r.to_vector();
  if (y.requires_grad()) y.backward(r);

  GradcheckResult result;
  NoGrad no_grad;
  std::vector<Var> scratch;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const Tensor& analytic = vars[i].grad();
    for (std::int64_t n = 0; n < x[i].numel(); ++n) {
      const Shape index = unravel(n, x[i].shape());
      const double x0 = x[i].at(index);
      x[i].set(index, x0 + options.step);
      const long double up = weighted_sum(evaluate(false, scratch).value(), weights);
      x[i].set(index, x0 - options.step);
      const long double down = weighted_sum(evaluate(false, scratch).value(), weights);
      x[i].set(index, x0);
      const double numeric = static_cast<double>((up - down) / (2 * options.step));
      const double a = analytic.defined() ? analytic.at(index) : 0.0;
      const double error = std::fabs(a - numeric);
      const double ratio = error / (options.atol + options.rtol * std::fabs(numeric));
      ++result.elements;
      result.worst_abs = std::fmax(result.worst_abs, error);
      if (!(ratio <= result.worst_ratio) || result.elements == 1) {
        result.worst_ratio = std::isnan(ratio) ? std::numeric_limits<double>::infinity() : ratio;
        result.input = i;
        result.index = index;
        result.analytic = a;
        result.numeric = numeric;
      }
    }
  }
  result.ok = result.worst_ratio <= 1;
  return result;
}

}  // namespace qkv::autograd
