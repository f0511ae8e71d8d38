#pragma once

// Shared pieces of the autodiff tests: random f64 inputs and a gradcheck expectation that prints
// the case and the worst element.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <limits>
#include <qkv/qkv.hpp>
#include <string>
#include <vector>

namespace qkv::testing {

using autograd::GradcheckOptions;
using autograd::Var;

inline Tensor random(const Shape& shape, std::uint64_t seed, double low = -1, double high = 1) {
  Generator generator(seed);
  return Tensor::uniform(shape, low, high, generator, DType::f64);
}

inline std::string shapes_of(const std::vector<Tensor>& inputs) {
  std::string s;
  for (const Tensor& t : inputs) {
    if (!s.empty()) s += ' ';
    s += shape_string(t.shape());
  }
  return s;
}

// a and b hold the same dtype, shape and values (the first element that differs is reported).
inline void expect_bitwise_equal(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.dtype(), b.dtype()) << what;
  ASSERT_EQ(a.shape(), b.shape()) << what;
  const std::vector<double> x = a.to_vector(), y = b.to_vector();
  for (std::size_t n = 0; n < x.size(); ++n) {
    if (x[n] != y[n]) {
      ADD_FAILURE() << what << ": element " << n << " is " << x[n] << " and " << y[n];
      return;
    }
  }
}

// gradcheck(f, inputs) passes; the case and the result are printed either way.
inline void expect_gradcheck(const std::string& name, const autograd::GradcheckFunction& f,
                             const std::vector<Tensor>& inputs, GradcheckOptions options = {}) {
  const autograd::GradcheckResult r = autograd::gradcheck(f, inputs, options);
  const std::string line = name + " inputs " + shapes_of(inputs) + " step " +
                           std::to_string(options.step) + ": " + r.describe();
  std::cout << "[ gradcheck ] " << line << "\n";
  EXPECT_TRUE(r.ok) << line;
  EXPECT_GT(r.elements, 0) << line;
}

// max |a - b| / max(1, max |b|)
inline double relative_difference(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = a.to_vector(), y = b.to_vector();
  EXPECT_EQ(x.size(), y.size());
  double scale = 1, worst = 0;
  for (const double v : y) scale = std::max(scale, std::fabs(v));
  for (std::size_t n = 0; n < x.size() && n < y.size(); ++n) {
    const double d = std::fabs(x[n] - y[n]);
    worst = std::max(worst, std::isnan(d) ? std::numeric_limits<double>::infinity() : d);
  }
  return worst / scale;
}

}  // namespace qkv::testing
