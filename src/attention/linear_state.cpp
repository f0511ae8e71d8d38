// qkv::LinearState: causal linear attention one step at a time.
#include <cmath>
#include <string>
#include <vector>

#include "attention/validate.hpp"
#include "kernels/linear_params.hpp"
#include "qkv/error.hpp"
#include "qkv/linear_attention.hpp"

namespace qkv {

LinearState::LinearState(std::int64_t B, std::int64_t Hk, std::int64_t D, std::int64_t Dv,
                         double eps)
    : B_(B), Hk_(Hk), D_(D), Dv_(Dv), eps_(eps) {
  if (B < 0) throw Error("B", ">= 0", std::to_string(B));
  if (Hk < 1) throw Error("Hk", ">= 1", std::to_string(Hk));
  if (D < 1) throw Error("D", ">= 1", std::to_string(D));
  if (Dv < 1) throw Error("Dv", ">= 1", std::to_string(Dv));
  if (!(eps > 0) || !std::isfinite(eps))
    throw Error("eps", "a finite number > 0", attention::num(eps));
  S_.assign(static_cast<std::size_t>(B * Hk * D * Dv), 0.0);
  z_.assign(static_cast<std::size_t>(B * Hk * D), 0.0);
}

// q [B, 1, Hq, D], k [B, 1, Hk, D], v [B, 1, Hk, Dv] -> out [B, 1, Hq, Dv]
Tensor LinearState::step(const Tensor& q, const Tensor& k, const Tensor& v) {
  for (const auto& [t, name] : {std::pair{&q, "q"}, std::pair{&k, "k"}, std::pair{&v, "v"}}) {
    if (!t->defined() || t->dim() != 4) {
      throw Error(name, "a 4-D tensor [B, 1, H, x]", t->defined() ? t->describe() : "undefined");
    }
  }
  if (q.dtype() != DType::f32 && q.dtype() != DType::f64) {
    throw Error("q", "dtype f32 or f64", std::string(dtype_name(q.dtype())));
  }
  const std::int64_t Hq = q.size(2);
  attention::expect_tensor(k, "k", {B_, 1, Hk_, D_}, q.dtype());
  attention::expect_tensor(v, "v", {B_, 1, Hk_, Dv_}, q.dtype());
  if (q.size(0) != B_ || q.size(1) != 1 || q.size(3) != D_ || Hq < 1 || Hq % Hk_ != 0) {
    throw Error("q",
                "[" + std::to_string(B_) + ", 1, a multiple of " + std::to_string(Hk_) + ", " +
                    std::to_string(D_) + "]",
                shape_string(q.shape()));
  }
  const Tensor qd = q.to(DType::f64), kd = k.to(DType::f64), vd = v.to(DType::f64);
  Tensor out = Tensor::empty({B_, 1, Hq, Dv_}, DType::f64);
  // Contiguous f64 copies: element (b, 0, h, c) of q at (b * Hq + h) * D + c, likewise k and v.
  const Tensor qc = qd.contiguous(), kc = kd.contiguous(), vc = vd.contiguous();
  const double* qs = qc.data_as<double>();
  const double* ks = kc.data_as<double>();
  const double* vs = vc.data_as<double>();
  double* os = out.data_as<double>();
  std::vector<double> num(static_cast<std::size_t>(Dv_));
  for (std::int64_t b = 0; b < B_; ++b) {
    for (std::int64_t hk = 0; hk < Hk_; ++hk) {
      // S += phi(k) v^T, z += phi(k)
      double* S = S_.data() + (b * Hk_ + hk) * D_ * Dv_;
      double* z = z_.data() + (b * Hk_ + hk) * D_;
      const double* kr = ks + (b * Hk_ + hk) * D_;
      const double* vr = vs + (b * Hk_ + hk) * Dv_;
      for (std::int64_t c = 0; c < D_; ++c) {
        const double f = kernels::elu_feature(kr[c]);
        z[c] += f;
        for (std::int64_t x = 0; x < Dv_; ++x) S[c * Dv_ + x] += f * vr[x];
      }
      // out = phi(q)^T S / (phi(q) . z + eps) for each query head of this k/v head
      for (std::int64_t h = hk * (Hq / Hk_); h < (hk + 1) * (Hq / Hk_); ++h) {
        const double* qr = qs + (b * Hq + h) * D_;
        std::fill(num.begin(), num.end(), 0.0);
        double den = 0;
        for (std::int64_t c = 0; c < D_; ++c) {
          const double a = kernels::elu_feature(qr[c]);
          den += a * z[c];
          for (std::int64_t x = 0; x < Dv_; ++x) num[x] += a * S[c * Dv_ + x];
        }
        den += eps_;
        for (std::int64_t x = 0; x < Dv_; ++x) os[(b * Hq + h) * Dv_ + x] = num[x] / den;
      }
    }
  }
  ++length_;
  return out.to(q.dtype());
}

}  // namespace qkv
