#pragma once

// Shared pieces of the nn tests: central differences over a module's parameters, in f64.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <iostream>
#include <qkv/qkv.hpp>
#include <string>
#include <vector>

#include "autograd/check.hpp"

namespace qkv::testing {

// The module's parameter names, in registration order.
inline std::vector<std::string> names_of(const nn::Module& m) {
  std::vector<std::string> names;
  for (const auto& [name, p] : m.named_parameters()) names.push_back(name);
  return names;
}

// L = sum(f() * R), R fixed random. Every parameter element of the module: backward's gradient
// against (L(p + h) - L(p - h)) / 2h, |analytic - numeric| <= atol + rtol |numeric|.
inline void expect_module_gradients(const std::string& name, nn::Module& module,
                                    const std::function<autograd::Var()>& f, double step = 1e-6,
                                    double rtol = 1e-5, double atol = 1e-8) {
  const autograd::Var out0 = f();
  const Tensor r = random(out0.shape(), 4242);
  const auto loss = [&] {
    autograd::NoGrad no_grad;
    const std::vector<double> o = f().value().to_vector(), w = r.to_vector();
    long double s = 0;
    for (std::size_t n = 0; n < o.size(); ++n) s += static_cast<long double>(o[n]) * w[n];
    return static_cast<double>(s);
  };
  module.zero_grad();
  autograd::sum(f() * autograd::Var(r)).backward();
  double worst = 0;
  std::string where;
  std::int64_t checked = 0;
  for (auto& [pname, p] : module.named_parameters()) {
    ASSERT_TRUE(p.grad().defined()) << name << ": no gradient reached " << pname;
    Tensor value = p.value();
    const std::vector<double> grad = p.grad().to_vector();
    for (std::int64_t n = 0; n < value.numel(); ++n) {
      auto* x = value.data_as<double>() + n;
      const double saved = *x;
      *x = saved + step;
      const double plus = loss();
      *x = saved - step;
      const double minus = loss();
      *x = saved;
      const double numeric = (plus - minus) / (2 * step);
      const double ratio = std::fabs(grad[n] - numeric) / (atol + rtol * std::fabs(numeric));
      if (ratio > worst) {
        worst = ratio;
        where = pname + "[" + std::to_string(n) + "] analytic " + std::to_string(grad[n]) +
                " numeric " + std::to_string(numeric);
      }
      ++checked;
    }
  }
  std::cout << "[ gradcheck ] " << name << ": " << checked << " parameter elements, worst ratio "
            << worst << " at " << where << "\n";
  EXPECT_LE(worst, 1.0) << name << ": " << where;
  EXPECT_GT(checked, 0);
}

}  // namespace qkv::testing
