// softmax and log_softmax along one dimension, stable.
#include <cmath>
#include <limits>

#include "ops/tensor_math.hpp"
#include "qkv/ops.hpp"

namespace qkv::ops {
namespace {

// x [...] -> [...], each lane of dimension dim normalized; log selects log_softmax.
Tensor softmax_of(const Tensor& x, std::int64_t dim, bool log) {
  expect_floating(x, "x");
  const std::int64_t d = wrap_dim(dim, x.dim(), "dim");
  const Lanes l = lanes(x.shape(), d);
  const Tensor xv = x.contiguous();
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  dispatch(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* in = xv.data_as<T>();
    T* o = out.data_as<T>();
    for_each_lane(l, [&](std::int64_t base, std::int64_t) {
      double m = -std::numeric_limits<double>::infinity();
      for (std::int64_t j = 0; j < l.n; ++j) m = std::fmax(m, in[base + j * l.inner]);
      if (m == -std::numeric_limits<double>::infinity()) {
        // Every entry masked: 0 (log: -inf) rather than exp(-inf - -inf) = NaN.
        for (std::int64_t j = 0; j < l.n; ++j) {
          o[base + j * l.inner] = log ? -std::numeric_limits<T>::infinity() : T(0);
        }
        return;
      }
      double sum = 0;
      for (std::int64_t j = 0; j < l.n; ++j) sum += std::exp(in[base + j * l.inner] - m);
      const double log_sum = std::log(sum);
      for (std::int64_t j = 0; j < l.n; ++j) {
        const double s = in[base + j * l.inner] - m;
        // softmax: out_j = exp(x_j - m) / sum;  log_softmax: out_j = x_j - m - log(sum)
        o[base + j * l.inner] = static_cast<T>(log ? s - log_sum : std::exp(s) / sum);
      }
    });
  });
  return out;
}

}  // namespace

// x [...] -> [...]
Tensor softmax(const Tensor& x, std::int64_t dim) { return softmax_of(x, dim, false); }
// x [...] -> [...]
Tensor log_softmax(const Tensor& x, std::int64_t dim) { return softmax_of(x, dim, true); }

}  // namespace qkv::ops
