// layer_norm over the trailing dimensions, with optional weight and bias.
#include "kernels/cpu/layer_norm.hpp"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "autograd/node.hpp"
#include "ops/layer_norm.hpp"
#include "ops/parallel.hpp"
#include "ops/tensor_math.hpp"
#include "qkv/autograd/ops.hpp"

namespace qkv::autograd {

namespace cpu_kernels = qkv::kernels::cpu;

// x [..., *normalized_shape], weight [*normalized_shape], bias [*normalized_shape] -> x's shape
Var layer_norm(const Var& x, const Shape& normalized_shape, const Var& weight, const Var& bias,
               double eps) {
  // rstd = 1 / sqrt(var + eps); xhat = (x - mean) * rstd; out = xhat * w + b
  if (!detail::recording({&x, &weight, &bias})) {  // nothing to save for a backward (NoGrad)
    return Var(
        ops::layer_norm(x.value(), normalized_shape, weight.defined() ? weight.value() : Tensor(),
                        bias.defined() ? bias.value() : Tensor(), eps),
        false);
  }
  ops::LayerNormSaved saved = ops::layer_norm_saving(x.value(), normalized_shape,
                                                     weight.defined() ? weight.value() : Tensor(),
                                                     bias.defined() ? bias.value() : Tensor(), eps);
  const Shape xs = x.shape();
  const DType dtype = x.dtype();
  const Tensor xhat = saved.xhat, rstd = saved.rstd;
  const std::int64_t rows = rstd.numel();
  std::int64_t n = 1;
  for (const std::int64_t s : normalized_shape) n *= s;
  const Tensor wv = weight.defined() ? weight.value().contiguous() : Tensor();
  const bool need_w = weight.defined(), need_b = bias.defined();
  return detail::record(std::move(saved.out), {&x, &weight, &bias}, [=](const Tensor& dout) {
    const Tensor g = dout.contiguous();
    Tensor dx = Tensor::empty(xs, dtype);
    Tensor dw = Tensor::empty(normalized_shape, dtype);
    Tensor db = Tensor::empty(normalized_shape, dtype);
    ops::dispatch(dtype, [&](auto zero) {
      using T = decltype(zero);
      // Each chunk of rows sums its own dw and db; the chunks' sums are added in chunk order.
      // Chunks of 2^12 elements' worth of rows, at most 64 of them, fixed by the shape: a batch
      // of qkv demo's translator, [448, 128], in for_chunks' 2^15 took 256 rows and 192, and the
      // second thread waited for the first (perf, 2 threads of the AMD EPYC Zen 5 VM, 2026-11-29);
      // now 14 chunks of 32.
      const std::int64_t chunk = std::max(
          std::max<std::int64_t>(1, 4096 / std::max<std::int64_t>(n, 1)), (rows + 63) / 64);
      const std::int64_t chunks = rows == 0 ? 0 : (rows + chunk - 1) / chunk;
      std::vector<double> dw_sums(static_cast<std::size_t>(chunks * n), 0.0), db_sums(dw_sums);
      // out = xhat * w + b: dxhat = g * w, dw = sum g * xhat, db = sum g;
      // xhat = (x - mean) * rstd: dx = rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat))
      ops::for_chunks(rows, chunk, [&](std::int64_t begin, std::int64_t end) {
        const std::size_t at = static_cast<std::size_t>(begin / chunk * n);
        cpu_kernels::layer_norm_backward_rows(
            g.data_as<T>() + begin * n, xhat.data_as<T>() + begin * n,
            wv.defined() ? wv.data_as<T>() : nullptr, rstd.data_as<double>() + begin, end - begin,
            n, dx.data_as<T>() + begin * n, dw_sums.data() + at, db_sums.data() + at);
      });
      for (std::int64_t j = 0; j < n; ++j) {
        double dw_j = 0, db_j = 0;
        for (std::int64_t c = 0; c < chunks; ++c) {
          dw_j += dw_sums[static_cast<std::size_t>(c * n + j)];
          db_j += db_sums[static_cast<std::size_t>(c * n + j)];
        }
        dw.data_as<T>()[j] = static_cast<T>(dw_j);
        db.data_as<T>()[j] = static_cast<T>(db_j);
      }
    });
    return std::vector<Tensor>{dx, need_w ? dw : Tensor(), need_b ? db : Tensor()};
  });
}

}  // namespace qkv::autograd
