#pragma once

// One attention problem for checking the fused kernel against the reference: sizes, options and
// input layout, a printable name, and random inputs built from a seed.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <ostream>
#include <qkv/qkv.hpp>
#include <string>
#include <utility>
#include <vector>

namespace qkv::testing {

struct FusedCase {
  std::int64_t B = 1, Tq = 8, Tk = 8, Hq = 2, Hk = 2, D = 16, Dv = 16;
  Causal causal = Causal::none;
  Window window;
  bool padding = false;  // key and query lengths shorter than Tk, Tq in some batches
  bool mask = false;     // a boolean keep-mask [B, 1, Tq, Tk]
  bool bias = false;     // an additive bias [Hq, Tq, Tk] (broadcast over B)
  bool alibi = false;
  double softcap = 0.0;
  double dropout = 0.0;
  bool strided = false;  // q, k, v passed as [B, H, T, D] tensors permuted to [B, T, H, D]
  double q_scale = 1.0;  // q times this: scores of ~q_scale (large ones are peaked, f32-rounded)
  std::uint64_t seed = 1;

  std::string name() const {
    std::string s;
    for (const auto& [label, value] :
         {std::pair{"B", B}, std::pair{"_Tq", Tq}, std::pair{"_Tk", Tk}, std::pair{"_Hq", Hq},
          std::pair{"_Hk", Hk}, std::pair{"_D", D}, std::pair{"_Dv", Dv}}) {
      s.append(label).append(std::to_string(value));
    }
    if (causal == Causal::top_left) s += "_causalTL";
    if (causal == Causal::bottom_right) s += "_causalBR";
    if (window.left >= 0 || window.right >= 0) {
      // "_win17_5", with "inf" for an unbounded side (test names allow no minus sign).
      auto side = [](std::int64_t w) { return w < 0 ? std::string("inf") : std::to_string(w); };
      s.append("_win").append(side(window.left)).append("_").append(side(window.right));
    }
    if (padding) s += "_pad";
    if (mask) s += "_mask";
    if (bias) s += "_bias";
    if (alibi) s += "_alibi";
    if (softcap > 0) s += "_softcap";
    if (dropout > 0) s += "_dropout";
    if (strided) s += "_strided";
    if (q_scale != 1.0) s += "_qx" + std::to_string(static_cast<long long>(q_scale));
    return s;
  }
};

inline void PrintTo(const FusedCase& c, std::ostream* os) { *os << c.name(); }

struct FusedInputs {
  Tensor q, k, v, dout;
  AttentionOptions options;
};

// Random inputs of the case in dtype (f64 values rounded to it), with options built from it.
inline FusedInputs make_inputs(const FusedCase& c, DType dtype) {
  Generator g(c.seed);
  FusedInputs in;
  auto make = [&](std::int64_t t, std::int64_t h, std::int64_t dim, double factor) {
    Tensor x = c.strided ? Tensor::randn({c.B, h, t, dim}, g, DType::f64)
                         : Tensor::randn({c.B, t, h, dim}, g, DType::f64);
    double* values = x.data_as<double>();
    for (std::int64_t n = 0; n < x.numel(); ++n) values[n] *= factor;
    x = x.to(dtype);
    return c.strided ? x.permute({0, 2, 1, 3}) : x;
  };
  in.q = make(c.Tq, c.Hq, c.D, c.q_scale);
  in.k = make(c.Tk, c.Hk, c.D, 1.0);
  in.v = make(c.Tk, c.Hk, c.Dv, 1.0);
  in.dout = Tensor::randn({c.B, c.Tq, c.Hq, c.Dv}, g, DType::f64).to(dtype);
  AttentionOptions& o = in.options;
  o.causal = c.causal;
  o.window = c.window;
  if (c.padding) {
    for (std::int64_t b = 0; b < c.B; ++b) {
      // Batch 0 is full; later batches lose a few keys and queries, the last one all its keys.
      const bool last = b == c.B - 1 && c.B > 2;
      o.key_lengths.push_back(last ? 0 : std::max<std::int64_t>(c.Tk - 5 * b, 0));
      o.query_lengths.push_back(std::max<std::int64_t>(c.Tq - 3 * b, 0));
    }
  }
  if (c.mask) {
    o.mask = Tensor::zeros({c.B, 1, c.Tq, c.Tk}, DType::boolean);
    for (std::int64_t b = 0; b < c.B; ++b) {
      for (std::int64_t i = 0; i < c.Tq; ++i) {
        for (std::int64_t j = 0; j < c.Tk; ++j) {
          o.mask.set({b, 0, i, j}, (i * 7 + j * 3 + b) % 5 != 0 ? 1.0 : 0.0);
        }
      }
    }
  }
  if (c.bias) o.bias = Tensor::randn({c.Hq, c.Tq, c.Tk}, g, DType::f64).to(dtype);
  if (c.alibi) {
    for (std::int64_t h = 0; h < c.Hq; ++h) o.alibi_slopes.push_back(1.0 / (2 << h));
  }
  o.softcap = c.softcap;
  o.dropout_p = c.dropout;
  o.seed = c.seed * 7919;
  o.offset = 3;
  return in;
}

// Max |a - b|; equal infinities count as agreement, NaN or a lone infinity as infinite error.
inline double max_error(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = a.to_vector();
  const std::vector<double> y = b.to_vector();
  double worst = 0;
  for (std::size_t n = 0; n < x.size(); ++n) {
    if (x[n] == y[n]) continue;
    const double e = std::fabs(x[n] - y[n]);
    worst = std::isfinite(e) ? std::max(worst, e) : std::numeric_limits<double>::infinity();
  }
  return worst;
}

// The largest finite |x| of t.
inline double max_abs(const Tensor& t) {
  double m = 0;
  for (const double x : t.to_vector()) {
    if (std::isfinite(x)) m = std::max(m, std::fabs(x));
  }
  return m;
}

// Whether two runs' results, each tensor as its values, hold the same bits (NaN included).
inline bool bitwise_equal(const std::vector<std::vector<double>>& a,
                          const std::vector<std::vector<double>>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t t = 0; t < a.size(); ++t) {
    if (a[t].size() != b[t].size() ||
        std::memcmp(a[t].data(), b[t].data(), a[t].size() * sizeof(double)) != 0) {
      return false;
    }
  }
  return true;
}

}  // namespace qkv::testing
