#pragma once

// Gradients of L = sum(dout * out(q, k, v)) against central differences, for the flex tests.

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "qkv/qkv.hpp"

namespace qkv::testing {

using Forward = std::function<Tensor(const Tensor& q, const Tensor& k, const Tensor& v)>;

// inputs = {q, k, v} (f64), grads = their analytic gradients of L: every `stride`-th element of
// each against (L(x + h) - L(x - h)) / 2h with h = 1e-6, within tol.
inline void expect_finite_differences(const Forward& out, const Tensor& dout,
                                      const std::vector<Tensor>& inputs,
                                      const std::vector<Tensor>& grads, std::int64_t stride,
                                      double tol) {
  const auto loss = [&](const std::vector<Tensor>& x) {
    const std::vector<double> a = out(x[0], x[1], x[2]).to_vector(), w = dout.to_vector();
    double sum = 0;
    for (std::size_t n = 0; n < a.size(); ++n) sum += a[n] * w[n];
    return sum;
  };
  for (std::size_t a = 0; a < inputs.size(); ++a) {
    const std::vector<double> analytic = grads[a].to_vector();
    for (std::int64_t n = 0; n < inputs[a].numel(); n += stride) {
      const double h = 1e-6;
      std::vector<Tensor> plus = inputs, minus = inputs;
      plus[a] = inputs[a].clone();
      minus[a] = inputs[a].clone();
      plus[a].data_as<double>()[n] += h;
      minus[a].data_as<double>()[n] -= h;
      const double numeric = (loss(plus) - loss(minus)) / (2 * h);
      EXPECT_NEAR(analytic[static_cast<std::size_t>(n)], numeric, tol) << "arg " << a << " n " << n;
    }
  }
}

}  // namespace qkv::testing
