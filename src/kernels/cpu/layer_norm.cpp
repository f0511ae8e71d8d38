// Layer normalization's row passes per SIMD target (layer_norm.hpp).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/layer_norm.cpp"
#include "kernels/cpu/layer_norm.hpp"

#include <cmath>
#include <cstdint>

#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

// After foreach_target.h: compiled once per target.
#include "kernels/cpu/as_double-inl.h"

HWY_BEFORE_NAMESPACE();
namespace qkv::kernels::cpu::HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;

template <class T>
void Forward(const T* x, std::int64_t rows, std::int64_t n, const T* w, const T* b, double eps,
             T* out, T* xhat, double* rstd) {
  const hn::ScalableTag<double> dd;
  for (std::int64_t row = 0; row < rows; ++row) {
    const T* xr = x + row * n;
    auto acc = hn::Zero(dd);
    double tail = 0;
    ForLanes(n, [&](auto d, std::int64_t i) {
      if constexpr (hn::MaxLanes(d) == 1) {
        tail += hn::GetLane(LoadDouble(d, xr, i));
      } else {
        acc = hn::Add(acc, LoadDouble(d, xr, i));
      }
    });
    const double mean = SumWithTail(acc, tail) / static_cast<double>(n);
    acc = hn::Zero(dd);
    tail = 0;
    ForLanes(n, [&](auto d, std::int64_t i) {
      const auto c = hn::Sub(LoadDouble(d, xr, i), hn::Set(d, mean));
      if constexpr (hn::MaxLanes(d) == 1) {
        tail += hn::GetLane(hn::Mul(c, c));
      } else {
        acc = hn::MulAdd(c, c, acc);
      }
    });
    const double var = SumWithTail(acc, tail) / static_cast<double>(n);
    const double r = 1 / std::sqrt(var + eps);
    rstd[row] = r;
    ForLanes(n, [&](auto d, std::int64_t i) {
      const auto h = hn::Mul(hn::Sub(LoadDouble(d, xr, i), hn::Set(d, mean)), hn::Set(d, r));
      if (xhat != nullptr) StoreDouble(d, h, xhat + row * n, i);
      auto o = w != nullptr ? hn::Mul(h, LoadDouble(d, w, i)) : h;
      if (b != nullptr) o = hn::Add(o, LoadDouble(d, b, i));
      StoreDouble(d, o, out + row * n, i);
    });
  }
}

template <class T>
void Backward(const T* g, const T* xhat, const T* w, const double* rstd, std::int64_t rows,
              std::int64_t n, T* dx, double* dw_sum, double* db_sum) {
  const hn::ScalableTag<double> dd;
  for (std::int64_t row = 0; row < rows; ++row) {
    const T* gr = g + row * n;
    const T* hr = xhat + row * n;
    auto acc_d = hn::Zero(dd), acc_dh = hn::Zero(dd);
    double tail_d = 0, tail_dh = 0;
    ForLanes(n, [&](auto d, std::int64_t i) {
      const auto gj = LoadDouble(d, gr, i), h = LoadDouble(d, hr, i);
      const auto dxh = w != nullptr ? hn::Mul(gj, LoadDouble(d, w, i)) : gj;
      hn::StoreU(hn::MulAdd(gj, h, hn::LoadU(d, dw_sum + i)), d, dw_sum + i);
      hn::StoreU(hn::Add(gj, hn::LoadU(d, db_sum + i)), d, db_sum + i);
      if constexpr (hn::MaxLanes(d) == 1) {
        tail_d += hn::GetLane(dxh);
        tail_dh += hn::GetLane(hn::Mul(dxh, h));
      } else {
        acc_d = hn::Add(acc_d, dxh);
        acc_dh = hn::MulAdd(dxh, h, acc_dh);
      }
    });
    const double mean_dxhat = SumWithTail(acc_d, tail_d) / static_cast<double>(n);
    const double mean_dxhat_xhat = SumWithTail(acc_dh, tail_dh) / static_cast<double>(n);
    ForLanes(n, [&](auto d, std::int64_t i) {
      const auto gj = LoadDouble(d, gr, i), h = LoadDouble(d, hr, i);
      const auto dxh = w != nullptr ? hn::Mul(gj, LoadDouble(d, w, i)) : gj;
      const auto centered =
          hn::Sub(hn::Sub(dxh, hn::Set(d, mean_dxhat)), hn::Mul(h, hn::Set(d, mean_dxhat_xhat)));
      StoreDouble(d, hn::Mul(hn::Set(d, rstd[row]), centered), dx + row * n, i);
    });
  }
}

void ForwardF32(const float* x, std::int64_t rows, std::int64_t n, const float* w, const float* b,
                double eps, float* out, float* xhat, double* rstd) {
  Forward(x, rows, n, w, b, eps, out, xhat, rstd);
}
void ForwardF64(const double* x, std::int64_t rows, std::int64_t n, const double* w,
                const double* b, double eps, double* out, double* xhat, double* rstd) {
  Forward(x, rows, n, w, b, eps, out, xhat, rstd);
}
void BackwardF32(const float* g, const float* xhat, const float* w, const double* rstd,
                 std::int64_t rows, std::int64_t n, float* dx, double* dw_sum, double* db_sum) {
  Backward(g, xhat, w, rstd, rows, n, dx, dw_sum, db_sum);
}
void BackwardF64(const double* g, const double* xhat, const double* w, const double* rstd,
                 std::int64_t rows, std::int64_t n, double* dx, double* dw_sum, double* db_sum) {
  Backward(g, xhat, w, rstd, rows, n, dx, dw_sum, db_sum);
}

}  // namespace qkv::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qkv::kernels::cpu {

HWY_EXPORT(ForwardF32);
HWY_EXPORT(ForwardF64);
HWY_EXPORT(BackwardF32);
HWY_EXPORT(BackwardF64);

void layer_norm_rows(const float* x, std::int64_t rows, std::int64_t n, const float* w,
                     const float* b, double eps, float* out, float* xhat, double* rstd) {
  HWY_DYNAMIC_DISPATCH(ForwardF32)(x, rows, n, w, b, eps, out, xhat, rstd);
}
void layer_norm_rows(const double* x, std::int64_t rows, std::int64_t n, const double* w,
                     const double* b, double eps, double* out, double* xhat, double* rstd) {
  HWY_DYNAMIC_DISPATCH(ForwardF64)(x, rows, n, w, b, eps, out, xhat, rstd);
}
void layer_norm_backward_rows(const float* g, const float* xhat, const float* w, const double* rstd,
                              std::int64_t rows, std::int64_t n, float* dx, double* dw_sum,
                              double* db_sum) {
  HWY_DYNAMIC_DISPATCH(BackwardF32)(g, xhat, w, rstd, rows, n, dx, dw_sum, db_sum);
}
void layer_norm_backward_rows(const double* g, const double* xhat, const double* w,
                              const double* rstd, std::int64_t rows, std::int64_t n, double* dx,
                              double* dw_sum, double* db_sum) {
  HWY_DYNAMIC_DISPATCH(BackwardF64)(g, xhat, w, rstd, rows, n, dx, dw_sum, db_sum);
}

}  // namespace qkv::kernels::cpu
#endif
