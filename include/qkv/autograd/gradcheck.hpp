#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "qkv/autograd/var.hpp"
#include "qkv/tensor.hpp"

namespace qkv::autograd {

struct GradcheckOptions {
  double step = 1e-6;  // central-difference step, chosen per op by its test
  double rtol = 1e-6;
  double atol = 1e-8;
  std::uint64_t seed = 0;  // of the random weights R that make a non-scalar output a scalar
};

// The worst element over every input: where it is and both gradients there.
struct GradcheckResult {
  bool ok = true;          // every element within atol + rtol |numeric|
  double worst_ratio = 0;  // max |analytic - numeric| / (atol + rtol |numeric|)
  double worst_abs = 0;    // max |analytic - numeric|
  std::size_t input = 0;   // the input the worst ratio was found in
  Shape index;             // and its index there
  double analytic = 0;     // the gradients at that element
  double numeric = 0;
  std::int64_t elements = 0;     // how many were checked
  std::string describe() const;  // one line with all of the above
};

using GradcheckFunction = std::function<Var(const std::vector<Var>&)>;

// Compares the gradients backward() gives for L = sum(f(inputs) * R), R a fixed random tensor
// of f's output shape, with central differences (L(x + h) - L(x - h)) / 2h taken element by
// element with h = options.step, in f64 (the inputs must be f64; L is summed in long double).
// f must be deterministic in its inputs.
GradcheckResult gradcheck(const GradcheckFunction& f, const std::vector<Tensor>& inputs,
                          const GradcheckOptions& options = {});

}  // namespace qkv::autograd
