// The GRU cell (Cho et al. 2014, PyTorch's GRUCell) as one node: its forward saves the gates,
// its backward is written out beside it.
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "autograd/node.hpp"
#include "ops/tensor_math.hpp"
#include "qkv/autograd/ops.hpp"

namespace qkv::autograd {

namespace {

template <class T>
T sigmoid_of(T a) {
  return T(1) / (T(1) + std::exp(-a));
}

// dst [rows, cols] += bias [cols] on every row (bias null: nothing).
template <class T>
void add_rows(T* dst, const T* bias, std::int64_t rows, std::int64_t cols) {
  if (bias == nullptr) return;
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < cols; ++c) dst[r * cols + c] += bias[c];
  }
}

// [cols] <- the column sums of g [rows, cols].
template <class T>
Tensor column_sums(const T* g, std::int64_t rows, std::int64_t cols, DType dtype) {
  Tensor out = Tensor::zeros({cols}, dtype);
  T* o = out.data_as<T>();
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < cols; ++c) o[c] += g[r * cols + c];
  }
  return out;
}

void check_shape(const Var& v, const Shape& want, const char* name) {
  if (v.shape() != want) {
    throw Error(name, "shape " + shape_string(want), shape_string(v.shape()));
  }
}

}  // namespace

// x [N, I], h [N, H], w_ih [3H, I], w_hh [3H, H], b_ih [3H], b_hh [3H] -> h' [N, H]
Var gru_cell(const Var& x, const Var& h, const Var& w_ih, const Var& w_hh, const Var& b_ih,
             const Var& b_hh) {
  ops::expect_floating(x.value(), "x");
  if (x.dim() != 2) throw Error("x", "2 dimensions [N, I]", shape_string(x.shape()));
  ops::expect_floating(h.value(), "h");
  ops::expect_same_dtype(x.value(), h.value(), "h");
  if (h.dim() != 2 || h.shape()[0] != x.shape()[0]) {
    throw Error("h", "shape [" + std::to_string(x.shape()[0]) + ", H] (N from x)",
                shape_string(h.shape()));
  }
  const std::int64_t N = x.shape()[0], I = x.shape()[1], H = h.shape()[1];
  for (const auto& [param, name] : {std::pair{&w_ih, "w_ih"}, std::pair{&w_hh, "w_hh"},
                                    std::pair{&b_ih, "b_ih"}, std::pair{&b_hh, "b_hh"}}) {
    if (!param->defined()) {
      if (param == &w_ih || param == &w_hh) throw Error(name, "a defined Var", "an undefined one");
      continue;
    }
    ops::expect_floating(param->value(), name);
    ops::expect_same_dtype(x.value(), param->value(), name);
  }
  check_shape(w_ih, {3 * H, I}, "w_ih");
  check_shape(w_hh, {3 * H, H}, "w_hh");
  if (b_ih.defined()) check_shape(b_ih, {3 * H}, "b_ih");
  if (b_hh.defined()) check_shape(b_hh, {3 * H}, "b_hh");

  const DType dtype = x.dtype();
  const Tensor xv = x.value().contiguous(), hv = h.value().contiguous();
  const Tensor wi = w_ih.value().contiguous(), wh = w_hh.value().contiguous();
  const Tensor bi = b_ih.defined() ? b_ih.value().contiguous() : Tensor();
  const Tensor bh = b_hh.defined() ? b_hh.value().contiguous() : Tensor();
  Tensor out = Tensor::empty({N, H}, dtype);
  Tensor gates = Tensor::empty({N, 4 * H}, dtype);  // r, z, n and W_hn h + b_hn, saved
  ops::dispatch(dtype, [&](auto zero) {
    using T = decltype(zero);
    std::vector<T> gi(static_cast<std::size_t>(N * 3 * H)), gh(gi.size());
    // gi = x W_ih^T + b_ih, gh = h W_hh^T + b_hh, each [N, 3H] in the gate order r, z, n
    ops::gemm(false, true, N, 3 * H, I, xv.data_as<T>(), I, wi.data_as<T>(), I, gi.data(), 3 * H);
    ops::gemm(false, true, N, 3 * H, H, hv.data_as<T>(), H, wh.data_as<T>(), H, gh.data(), 3 * H);
    add_rows(gi.data(), bi.defined() ? bi.data_as<T>() : nullptr, N, 3 * H);
    add_rows(gh.data(), bh.defined() ? bh.data_as<T>() : nullptr, N, 3 * H);
    const T* hp = hv.data_as<T>();
    T* o = out.data_as<T>();
    T* g = gates.data_as<T>();
    for (std::int64_t s = 0; s < N; ++s) {
      const T* a = gi.data() + s * 3 * H;
      const T* b = gh.data() + s * 3 * H;
      for (std::int64_t j = 0; j < H; ++j) {
        // r = sigmoid(gi_r + gh_r), z = sigmoid(gi_z + gh_z), n = tanh(gi_n + r gh_n),
        // h' = (1 - z) n + z h
        const T r = sigmoid_of(a[j] + b[j]);
        const T z = sigmoid_of(a[H + j] + b[H + j]);
        const T n = std::tanh(a[2 * H + j] + r * b[2 * H + j]);
        o[s * H + j] = (T(1) - z) * n + z * hp[s * H + j];
        T* saved = g + s * 4 * H;
        saved[j] = r;
        saved[H + j] = z;
        saved[2 * H + j] = n;
        saved[3 * H + j] = b[2 * H + j];
      }
    }
  });

  return detail::record(
      std::move(out), {&x, &h, &w_ih, &w_hh, &b_ih, &b_hh}, [=](const Tensor& dout) {
        std::vector<Tensor> grads(6);
        ops::dispatch(dtype, [&](auto zero) {
          using T = decltype(zero);
          const Tensor dc = dout.contiguous();
          const T* d = dc.data_as<T>();
          const T* g = gates.data_as<T>();
          const T* hp = hv.data_as<T>();
          Tensor dgi = Tensor::empty({N, 3 * H}, dtype), dgh = Tensor::empty({N, 3 * H}, dtype);
          Tensor dh = Tensor::empty({N, H}, dtype);
          T* pi = dgi.data_as<T>();
          T* ph = dgh.data_as<T>();
          T* pd = dh.data_as<T>();
          for (std::int64_t s = 0; s < N; ++s) {
            const T* saved = g + s * 4 * H;
            for (std::int64_t j = 0; j < H; ++j) {
              const T r = saved[j], z = saved[H + j], n = saved[2 * H + j];
              const T ghn = saved[3 * H + j], dy = d[s * H + j];
              // h' = (1 - z) n + z h  ->  dn = dh' (1 - z), dz = dh' (h - n), dh += dh' z
              const T dn = dy * (T(1) - z);
              const T dz = dy * (hp[s * H + j] - n);
              pd[s * H + j] = dy * z;
              // n = tanh(a_n), a_n = gi_n + r gh_n  ->  da_n = dn (1 - n^2); dgi_n = da_n,
              // dr = da_n gh_n, dgh_n = da_n r
              const T da = dn * (T(1) - n * n);
              // r = sigmoid(gi_r + gh_r), z = sigmoid(gi_z + gh_z)  ->  d pre = d gate g (1 - g)
              const T dr = da * ghn * r * (T(1) - r);
              const T dzp = dz * z * (T(1) - z);
              T* ri = pi + s * 3 * H;
              T* rh = ph + s * 3 * H;
              ri[j] = rh[j] = dr;
              ri[H + j] = rh[H + j] = dzp;
              ri[2 * H + j] = da;
              rh[2 * H + j] = da * r;
            }
          }
          // gi = x W_ih^T + b_ih  ->  dx = dgi W_ih, dW_ih = dgi^T x, db_ih = sum_N dgi
          Tensor dx = Tensor::empty({N, I}, dtype), dwi = Tensor::empty({3 * H, I}, dtype);
          ops::gemm(false, false, N, I, 3 * H, pi, 3 * H, wi.data_as<T>(), I, dx.data_as<T>(), I);
          ops::gemm(true, false, 3 * H, I, N, pi, 3 * H, xv.data_as<T>(), I, dwi.data_as<T>(), I);
          // gh = h W_hh^T + b_hh  ->  dh += dgh W_hh, dW_hh = dgh^T h, db_hh = sum_N dgh
          Tensor dhh = Tensor::empty({N, H}, dtype), dwh = Tensor::empty({3 * H, H}, dtype);
          ops::gemm(false, false, N, H, 3 * H, ph, 3 * H, wh.data_as<T>(), H, dhh.data_as<T>(), H);
          ops::gemm(true, false, 3 * H, H, N, ph, 3 * H, hp, H, dwh.data_as<T>(), H);
          const T* extra = dhh.data_as<T>();
          for (std::int64_t e = 0; e < N * H; ++e) pd[e] += extra[e];
          grads[0] = dx;
          grads[1] = dh;
          grads[2] = dwi;
          grads[3] = dwh;
          if (bi.defined()) grads[4] = column_sums(pi, N, 3 * H, dtype);
          if (bh.defined()) grads[5] = column_sums(ph, N, 3 * H, dtype);
        });
        return grads;
      });
}

}  // namespace qkv::autograd
