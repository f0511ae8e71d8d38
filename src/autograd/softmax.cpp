// softmax and log_softmax along one dimension, stable.
#include <cmath>
#include <limits>
#include <vector>

#include "autograd/node.hpp"
#include "ops/tensor_math.hpp"
#include "qkv/autograd/ops.hpp"

namespace qkv::autograd {
namespace {

// x [...] -> [...], each lane of dimension dim normalized; log selects log_softmax.
Var softmax_impl(const Var& x, std::int64_t dim, bool log) {
  // softmax: out_j = exp(x_j - m) / sum;  log_softmax: out_j = x_j - m - log(sum)
  Tensor out = log ? ops::log_softmax(x.value(), dim) : ops::softmax(x.value(), dim);
  const std::int64_t d = ops::wrap_dim(dim, x.dim(), "dim");
  const ops::Lanes l = ops::lanes(x.shape(), d);
  const Tensor y = out;
  return detail::record(std::move(out), {&x}, [=](const Tensor& dout) {
    const Tensor g = dout.contiguous();
    Tensor dx = Tensor::empty(g.shape(), g.dtype());
    ops::dispatch(g.dtype(), [&](auto zero) {
      using T = decltype(zero);
      const T* pg = g.data_as<T>();
      const T* py = y.data_as<T>();
      T* pd = dx.data_as<T>();
      ops::for_each_lane(l, [&](std::int64_t base, std::int64_t) {
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
      });
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
