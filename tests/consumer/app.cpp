// A program outside the qkv tree, built against the installed package by the README's own
// CMakeLists.txt (no C++ standard of its own): it must compile with only <qkv/qkv.hpp>, link,
// compute a causal attention whose last row averages v, and a gradient through the autodiff
// engine's matmul (which links the BLAS).
#include <cmath>
#include <cstdio>
#include <qkv/qkv.hpp>
#include <string>

int main() {
  qkv::Generator generator(7);
  const qkv::Tensor q = qkv::Tensor::zeros({1, 4, 2, 8});  // zero scores: uniform weights
  const qkv::Tensor k = qkv::Tensor::randn({1, 4, 2, 8}, generator);
  const qkv::Tensor v = qkv::Tensor::randn({1, 4, 2, 8}, generator);
  qkv::AttentionOptions options;
  options.causal = qkv::Causal::top_left;
  const qkv::AttentionOutput result = qkv::attention_forward(q, k, v, options);
  for (std::int64_t c = 0; c < 8; ++c) {
    double mean = 0;
    for (std::int64_t j = 0; j < 4; ++j) mean += v.at({0, j, 1, c}) / 4;
    if (std::fabs(result.out.at({0, 3, 1, c}) - mean) > 1e-6) {
      std::printf("consumer: out[0, 3, 1, %lld] = %g, expected %g\n", static_cast<long long>(c),
                  result.out.at({0, 3, 1, c}), mean);
      return 1;
    }
  }
  // d sum(x w) / dw[i, j] = sum_r x[r, i]
  const qkv::Tensor x = qkv::Tensor::randn({3, 2}, generator, qkv::DType::f64);
  qkv::autograd::Var w(qkv::Tensor::randn({2, 4}, generator, qkv::DType::f64), true);
  qkv::autograd::sum(qkv::autograd::matmul(qkv::autograd::Var(x), w)).backward();
  for (std::int64_t i = 0; i < 2; ++i) {
    const double expected = x.at({0, i}) + x.at({1, i}) + x.at({2, i});
    if (std::fabs(w.grad().at({i, 3}) - expected) > 1e-12) {
      std::printf("consumer: dw[%lld, 3] = %g, expected %g\n", static_cast<long long>(i),
                  w.grad().at({i, 3}), expected);
      return 1;
    }
  }
  std::printf("consumer: qkv %s found, linked and correct\n", std::string(qkv::version()).c_str());
  return 0;
}
