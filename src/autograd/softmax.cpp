// softmax and log_softmax along one dimension, stable.
#include <cmath>
#include <limits>
#include <vector>

#include "autograd/kernels.hpp"
#include "autograd/node.hpp"
#include "qkv/autograd/ops.hpp"

namespace qkv::autograd {
namespace {

// x [...] -> [...], each lane of dimension dim normalized; log selects log_softmax.
Var softmax_impl(const Var& x, std::int64_t dim, bool log) {
  kernels::expect_floating(x.value(), "x");
  const std::int64_t d = kernels::wrap_dim(dim, x.dim(), "dim");
  const kernels::Lanes l = kernels::lanes(x.shape(), d);
  const Tensor xv = x.value().contiguous();
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  kernels::dispatch(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* in = xv.data_as<T>();
    T* o = out.data_as<T>();
    for (std::int64_t a = 0; a < l.outer; ++a) {
      for (std::int64_t i = 0; i < l.inner; ++i) {
        const std::int64_t base = a * l.n * l.inner + i;
        double m = -std::numeric_limits<double>::infinity();
        for (std::int64_t j = 0; j < l.n; ++j) m = std::fmax(m, in[base + j * l.inner]);
        if (m == -std::numeric_limits<double>::infinity()) {
          // Every entry masked: 0 (log: -inf) rather than exp(-inf - -inf) = NaN.
          for (std::int64_t j = 0; j < l.n; ++j) {
            o[base + j * l.inner] = log ? -std::numeric_limits<T>::infinity() : T(0);
          }
          continue;
        }
        double sum = 0;
        for (std::int64_t j = 0; j < l.n; ++j) sum += std::exp(in[base + j * l.inner] - m);
        const double log_sum = std::log(sum);
        for (std::int64_t j = 0; j < l.n; ++j) {
          const double s = in[base + j * l.inner] - m;
          // softmax: out_j = exp(x_j - m) / sum;  log_softmax: out_j = x_j - m - log(sum)
          o[base + j * l.inner] = static_cast<T>(log ? s - log_sum : std::exp(s) / sum);
        }
      }
    }
  });
  const Tensor y = out;
  return detail::record(std::move(out), {&x}, [=](const Tensor& dout) {
    const Tensor g = dout.contiguous();
    Tensor dx = Tensor::empty(g.shape(), g.dtype());
    kernels::dispatch(g.dtype(), [&](auto zero) {
      using T = decltype(zero);
      const T* pg = g.data_as<T>();
      const T* py = y.data_as<T>();
      T* pd = dx.data_as<T>();
      for (std::int64_t a = 0; a < l.outer; ++a) {
        for (std::int64_t i = 0; i < l.inner; ++i) {
          const std::int64_t base = a * l.n * l.inner + i;
          // A row of log_softmax that is -inf everywhere came from a fully masked row.
          bool masked_row = log;
          for (std::int64_t j = 0; j < l.n && masked_row; ++j) {
            masked_row = py[base + j * l.inner] == -std::numeric_limits<T>::infinity();
          }
          double dot = 0;  // softmax: sum_j g_j y_j;  log_softmax: sum_j g_j
          for (std::int64_t j = 0; j < l.n; ++j) {
            dot += log ? pg[base + j * l.inner]
                       : static_cast<double>(pg[base + j * l.inner]) * py[base + j * l.inner];
          }
          for (std::int64_t j = 0; j < l.n; ++j) {
            const std::int64_t n = base + j * l.inner;
            if (log) {
              // out_j = x_j - m - log(sum): dx_j = g_j - exp(out_j) sum_k g_k
              pd[n] = masked_row ? T(0) : static_cast<T>(pg[n] - std::exp(py[n]) * dot);
            } else {
              // out_j = exp(x_j - m) / sum: dx_j = y_j (g_j - sum_k g_k y_k)
              pd[n] = static_cast<T>(py[n] * (pg[n] - dot));
            }
          }
        }
      }
    });
    return std::vector<Tensor>{dx};
  });
}

}  // namespace

// x [...] -> [...]
Var softmax(const Var& x, std::int64_t dim) { return softmax_impl(x, dim, false); }
// x [...] -> [...]
Var log_softmax(const Var& x, std::int64_t dim) { return softmax_impl(x, dim, true); }

}  // namespace qkv::autograd
