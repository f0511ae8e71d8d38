// Cross entropy's row passes per SIMD target (cross_entropy.hpp).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/cross_entropy.cpp"
#include "kernels/cpu/cross_entropy.hpp"

#include <cmath>
#include <cstdint>
#include <limits>

#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

// After foreach_target.h: compiled once per target.
#include "hwy/contrib/math/math-inl.h"
#include "kernels/cpu/as_double-inl.h"

HWY_BEFORE_NAMESPACE();
namespace qkv::kernels::cpu::HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;

template <class T>
void Forward(const T* x, std::int64_t rows, std::int64_t C, const std::int64_t* targets,
             std::int64_t ignore, double eps, double* p, double* loss) {
  const hn::ScalableTag<double> dd;
  for (std::int64_t n = 0; n < rows; ++n) {
    loss[n] = 0;
    if (targets[n] == ignore) continue;
    const T* xr = x + n * C;
    double* pr = p + n * C;
    // m = max_c x[c]
    auto acc_max = hn::Set(dd, -std::numeric_limits<double>::infinity());
    double tail_max = -std::numeric_limits<double>::infinity();
    ForLanes(C, [&](auto d, std::int64_t c) {
      if constexpr (hn::MaxLanes(d) == 1) {
        tail_max = std::fmax(tail_max, hn::GetLane(LoadDouble(d, xr, c)));
      } else {
        acc_max = hn::Max(acc_max, LoadDouble(d, xr, c));
      }
    });
    const double m = std::fmax(hn::GetLane(hn::MaxOfLanes(dd, acc_max)), tail_max);
    // e[c] = exp(x[c] - m) into p; sum = sum_c e[c]; sum_x = sum_c x[c]. Highway's Exp reads NaN
    // as 0, so a NaN difference is kept as it is.
    auto acc_sum = hn::Zero(dd), acc_x = hn::Zero(dd);
    double tail_sum = 0, tail_x = 0;
    ForLanes(C, [&](auto d, std::int64_t c) {
      const auto v = LoadDouble(d, xr, c);
      const auto diff = hn::Sub(v, hn::Set(d, m));
      const auto e = hn::IfThenElse(hn::IsNaN(diff), diff, hn::Exp(d, diff));
      hn::StoreU(e, d, pr + c);
      if constexpr (hn::MaxLanes(d) == 1) {
        tail_sum += hn::GetLane(e);
        tail_x += hn::GetLane(v);
      } else {
        acc_sum = hn::Add(acc_sum, e);
        acc_x = hn::Add(acc_x, v);
      }
    });
    const double sum = SumWithTail(acc_sum, tail_sum);
    // p[c] = e[c] / sum
    ForLanes(C, [&](auto d, std::int64_t c) {
      hn::StoreU(hn::Div(hn::LoadU(d, pr + c), hn::Set(d, sum)), d, pr + c);
    });
    // log p[c] = x[c] - lse, lse = m + log(sum); sum_c log p[c] = sum_x - C lse.
    const double lse = m + std::log(sum);
    double l = -(1 - eps) * (static_cast<double>(xr[targets[n]]) - lse);
    if (eps > 0)
      l -= eps / static_cast<double>(C) *
           (SumWithTail(acc_x, tail_x) - static_cast<double>(C) * lse);
    loss[n] = l;
  }
}

template <class T>
void Backward(const double* p, std::int64_t rows, std::int64_t C, const std::int64_t* targets,
              std::int64_t ignore, double eps, double scale, T* dx) {
  const double spread = eps / static_cast<double>(C);
  for (std::int64_t n = 0; n < rows; ++n) {
    const double* pr = p + n * C;
    T* dr = dx + n * C;
    if (targets[n] == ignore) {
      ForLanes(C, [&](auto d, std::int64_t c) { StoreDouble(d, hn::Zero(d), dr, c); });
      continue;
    }
    // dx[c] = scale (p[c] - eps / C), and at the target scale (p[t] - ((1 - eps) + eps / C))
    ForLanes(C, [&](auto d, std::int64_t c) {
      const auto v = hn::Mul(hn::Set(d, scale), hn::Sub(hn::LoadU(d, pr + c), hn::Set(d, spread)));
      StoreDouble(d, v, dr, c);
    });
    const std::int64_t t = targets[n];
    dr[t] = static_cast<T>(scale * (pr[t] - ((1 - eps) + spread)));
  }
}

void ForwardF32(const float* x, std::int64_t rows, std::int64_t C, const std::int64_t* targets,
                std::int64_t ignore, double eps, double* p, double* loss) {
  Forward(x, rows, C, targets, ignore, eps, p, loss);
}
void ForwardF64(const double* x, std::int64_t rows, std::int64_t C, const std::int64_t* targets,
                std::int64_t ignore, double eps, double* p, double* loss) {
  Forward(x, rows, C, targets, ignore, eps, p, loss);
}
void BackwardF32(const double* p, std::int64_t rows, std::int64_t C, const std::int64_t* targets,
                 std::int64_t ignore, double eps, double scale, float* dx) {
  Backward(p, rows, C, targets, ignore, eps, scale, dx);
}
void BackwardF64(const double* p, std::int64_t rows, std::int64_t C, const std::int64_t* targets,
                 std::int64_t ignore, double eps, double scale, double* dx) {
  Backward(p, rows, C, targets, ignore, eps, scale, dx);
}

}  // namespace qkv::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qkv::kernels::cpu {

HWY_EXPORT(ForwardF32);
HWY_EXPORT(ForwardF64);
HWY_EXPORT(BackwardF32);
HWY_EXPORT(BackwardF64);

void cross_entropy_rows(const float* x, std::int64_t rows, std::int64_t C,
                        const std::int64_t* targets, std::int64_t ignore, double eps, double* p,
                        double* loss) {
  HWY_DYNAMIC_DISPATCH(ForwardF32)(x, rows, C, targets, ignore, eps, p, loss);
}
void cross_entropy_rows(const double* x, std::int64_t rows, std::int64_t C,
                        const std::int64_t* targets, std::int64_t ignore, double eps, double* p,
                        double* loss) {
  HWY_DYNAMIC_DISPATCH(ForwardF64)(x, rows, C, targets, ignore, eps, p, loss);
}
void cross_entropy_backward_rows(const double* p, std::int64_t rows, std::int64_t C,
                                 const std::int64_t* targets, std::int64_t ignore, double eps,
                                 double scale, float* dx) {
  HWY_DYNAMIC_DISPATCH(BackwardF32)(p, rows, C, targets, ignore, eps, scale, dx);
}
void cross_entropy_backward_rows(const double* p, std::int64_t rows, std::int64_t C,
                                 const std::int64_t* targets, std::int64_t ignore, double eps,
                                 double scale, double* dx) {
  HWY_DYNAMIC_DISPATCH(BackwardF64)(p, rows, C, targets, ignore, eps, scale, dx);
}

}  // namespace qkv::kernels::cpu
#endif
