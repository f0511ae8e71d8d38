// A program outside the qkv tree, built against the installed package: it must compile with
// only <qkv/qkv.hpp>, link, and compute a causal attention whose last row averages v.
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
  std::printf("consumer: qkv %s found, linked and correct\n", std::string(qkv::version()).c_str());
  return 0;
}
