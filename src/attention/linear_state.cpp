// qkv::LinearState: causal linear attention one step at a time.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "attention/linear_features.hpp"
#include "attention/validate.hpp"
#include "kernels/linear_params.hpp"
#include "qkv/error.hpp"
#include "qkv/linear_attention.hpp"

namespace qkv {

namespace {

// The logits of favor (qkv/linear_attention.hpp) of x [D] under omega [F, D] (scaled): u [F] =
// omega x, minus s |x|^2 / 2 for a key; returns their largest.
double favor_logits(const std::vector<double>& omega, const double* x, std::int64_t D, double scale,
                    bool key, std::vector<double>& u) {
  double half_norm = 0;
  for (std::int64_t c = 0; c < D; ++c) half_norm += x[c] * x[c];
  half_norm = key ? half_norm * scale / 2 : 0;
  double m = -std::numeric_limits<double>::infinity();
  for (std::size_t f = 0; f < u.size(); ++f) {
    double dot = 0;
    for (std::int64_t c = 0; c < D; ++c) dot += omega[f * D + c] * x[c];
    u[f] = dot - half_norm;
    m = std::max(m, u[f]);
  }
  return m;
}

}  // namespace

LinearState::LinearState(std::int64_t B, std::int64_t Hk, std::int64_t D, std::int64_t Dv,
                         const LinearOptions& options)
    : B_(B), Hk_(Hk), D_(D), Dv_(Dv), F_(0), options_(options) {
  if (B < 0) throw Error("B", ">= 0", std::to_string(B));
  if (Hk < 1) throw Error("Hk", ">= 1", std::to_string(Hk));
  if (D < 1) throw Error("D", ">= 1", std::to_string(D));
  if (Dv < 1) throw Error("Dv", ">= 1", std::to_string(Dv));
  attention::validate_feature_options(options, DType::f64);
  if (options.causal != Causal::none) {
    throw Error("options.causal", "Causal::none (the state is causal by nature)",
                options.causal == Causal::top_left ? "Causal::top_left" : "Causal::bottom_right");
  }
  if (!options.key_lengths.empty()) {
    throw Error("options.key_lengths", "empty",
                std::to_string(options.key_lengths.size()) + " lengths");
  }
  if (options.backend != Backend::automatic) {
    throw Error("options.backend", "Backend::automatic", "another backend");
  }
  F_ = linear_feature_count(options, D);
  if (options.feature_map == FeatureMap::favor) {
    omega_ = attention::scaled_favor_features(options, D);
  }
  S_.assign(static_cast<std::size_t>(B * Hk * F_ * Dv), 0.0);
  z_.assign(static_cast<std::size_t>(B * Hk * F_), 0.0);
  unit_.assign(static_cast<std::size_t>(B * Hk), -std::numeric_limits<double>::infinity());
  features_.assign(static_cast<std::size_t>(F_), 0.0);
}

// k [D], v [Dv] of (b, hk): S += phi(k) v^T, z += phi(k); under favor phi(k) relative to the
// unit, the largest key logit so far, S and z rescaled when this key raises it.
void LinearState::take(std::int64_t b, std::int64_t hk, const double* k, const double* v) {
  double* S = S_.data() + (b * Hk_ + hk) * F_ * Dv_;
  double* z = z_.data() + (b * Hk_ + hk) * F_;
  std::vector<double>& f = features_;
  if (options_.feature_map == FeatureMap::favor) {
    const double m = favor_logits(omega_, k, D_, attention::favor_scale(options_, D_), true, f);
    double& unit = unit_[static_cast<std::size_t>(b * Hk_ + hk)];
    if (m > unit) {
      if (std::isfinite(unit)) {
        const double shrink = std::exp(unit - m);
        for (std::int64_t x = 0; x < F_ * Dv_; ++x) S[x] *= shrink;
        for (std::int64_t c = 0; c < F_; ++c) z[c] *= shrink;
      }
      unit = m;
    }
    const double factor = 1 / std::sqrt(static_cast<double>(F_));
    for (std::int64_t c = 0; c < F_; ++c) f[c] = std::exp(f[c] - unit) * factor;
  } else {
    for (std::int64_t c = 0; c < F_; ++c) f[c] = kernels::elu_feature(k[c]);
  }
  for (std::int64_t c = 0; c < F_; ++c) {
    z[c] += f[c];
    for (std::int64_t x = 0; x < Dv_; ++x) S[c * Dv_ + x] += f[c] * v[x];
  }
}

// q [D] of a query head of k/v head hk of batch b -> out [Dv] = phi(q)^T S / (phi(q) . z + eps)
void LinearState::attend(std::int64_t b, std::int64_t hk, const double* q, double* out) {
  const double* S = S_.data() + (b * Hk_ + hk) * F_ * Dv_;
  const double* z = z_.data() + (b * Hk_ + hk) * F_;
  std::vector<double>& a = features_;
  if (options_.feature_map == FeatureMap::favor) {
    const double m = favor_logits(omega_, q, D_, 0, false, a);
    const double factor = 1 / std::sqrt(static_cast<double>(F_));
    for (std::int64_t c = 0; c < F_; ++c) a[c] = std::exp(a[c] - m) * factor;
  } else {
    for (std::int64_t c = 0; c < F_; ++c) a[c] = kernels::elu_feature(q[c]);
  }
  std::fill_n(out, Dv_, 0.0);
  double den = 0;
  for (std::int64_t c = 0; c < F_; ++c) {
    den += a[c] * z[c];
    for (std::int64_t x = 0; x < Dv_; ++x) out[x] += a[c] * S[c * Dv_ + x];
  }
  den += options_.eps;
  for (std::int64_t x = 0; x < Dv_; ++x) out[x] /= den;
}

// k [B, T, Hk, D], v [B, T, Hk, Dv] -> (checked) contiguous f64 copies
std::pair<Tensor, Tensor> LinearState::keys_of(const Tensor& k, const Tensor& v,
                                               std::int64_t T) const {
  if (!is_floating(k.dtype())) {
    throw Error("k", "a floating dtype (f64, f32, bf16, f16)", std::string(dtype_name(k.dtype())));
  }
  attention::expect_tensor(k, "k", {B_, T, Hk_, D_}, k.dtype());
  attention::expect_tensor(v, "v", {B_, T, Hk_, Dv_}, k.dtype());
  return {k.to(DType::f64).contiguous(), v.to(DType::f64).contiguous()};
}

// k [B, T, Hk, D], v [B, T, Hk, Dv]
void LinearState::append(const Tensor& k, const Tensor& v) {
  if (!k.defined() || k.dim() != 4) {
    throw Error("k", "a 4-D tensor [B, T, Hk, D]", k.defined() ? k.describe() : "undefined");
  }
  const std::int64_t T = k.size(1);
  const auto [kc, vc] = keys_of(k, v, T);
  const double* ks = kc.data_as<double>();
  const double* vs = vc.data_as<double>();
  for (std::int64_t b = 0; b < B_; ++b) {
    for (std::int64_t t = 0; t < T; ++t) {
      for (std::int64_t hk = 0; hk < Hk_; ++hk) {
        take(b, hk, ks + ((b * T + t) * Hk_ + hk) * D_, vs + ((b * T + t) * Hk_ + hk) * Dv_);
      }
    }
  }
  length_ += T;
}

// q [B, 1, Hq, D], k [B, 1, Hk, D], v [B, 1, Hk, Dv] -> out [B, 1, Hq, Dv]
Tensor LinearState::step(const Tensor& q, const Tensor& k, const Tensor& v) {
  for (const auto& [t, name] : {std::pair{&q, "q"}, std::pair{&k, "k"}, std::pair{&v, "v"}}) {
    if (!t->defined() || t->dim() != 4) {
      throw Error(name, "a 4-D tensor [B, 1, H, x]", t->defined() ? t->describe() : "undefined");
    }
  }
  if (!is_floating(q.dtype())) {
    throw Error("q", "a floating dtype (f64, f32, bf16, f16)", std::string(dtype_name(q.dtype())));
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
  const auto [kc, vc] = keys_of(k, v, 1);
  // Contiguous f64 copies: element (b, 0, h, c) of q at (b * Hq + h) * D + c, likewise k and v.
  const Tensor qc = q.to(DType::f64).contiguous();
  Tensor out = Tensor::empty({B_, 1, Hq, Dv_}, DType::f64);
  const double* qs = qc.data_as<double>();
  const double* ks = kc.data_as<double>();
  const double* vs = vc.data_as<double>();
  double* os = out.data_as<double>();
  for (std::int64_t b = 0; b < B_; ++b) {
    for (std::int64_t hk = 0; hk < Hk_; ++hk) {
      take(b, hk, ks + (b * Hk_ + hk) * D_, vs + (b * Hk_ + hk) * Dv_);
      for (std::int64_t h = hk * (Hq / Hk_); h < (hk + 1) * (Hq / Hk_); ++h) {
        attend(b, hk, qs + (b * Hq + h) * D_, os + (b * Hq + h) * Dv_);
      }
    }
  }
  ++length_;
  return out.to(q.dtype());
}

}  // namespace qkv
