#pragma once

// Shared pieces of the reference kernel's tests: a printable attention case, random inputs built
// from it, and a dense oracle written from the semantics in qkv/attention.hpp alone (long double,
// every element read through Tensor::at, the [B, Hq, Tq, Tk] keep-mask and score matrix built
// directly), so that nothing of src/kernels is reused by what checks it.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <ostream>
#include <qkv/qkv.hpp>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace qkv::testing {

// The shape a mask or bias is given in, right-aligned against [B, Hq, Tq, Tk].
enum class Broadcast : std::uint8_t {
  none,     // not given
  tk,       // [Tk]: one key-padding row for everything
  tq_tk,    // [Tq, Tk]
  h_tq_tk,  // [Hq, Tq, Tk]
  h_tk,     // [1, Hq, 1, Tk]
  b_tq_tk,  // [B, 1, Tq, Tk]
  full,     // [B, Hq, Tq, Tk]
};

inline const char* broadcast_name(Broadcast s) {
  switch (s) {
    case Broadcast::none:
      return "none";
    case Broadcast::tk:
      return "Tk";
    case Broadcast::tq_tk:
      return "TqTk";
    case Broadcast::h_tq_tk:
      return "HqTqTk";
    case Broadcast::h_tk:
      return "1Hq1Tk";
    case Broadcast::b_tq_tk:
      return "B1TqTk";
    case Broadcast::full:
      return "BHqTqTk";
  }
  return "?";
}

// How q, k and v are laid out in memory; the logical shape is always [B, T, H, D].
enum class Layout : std::uint8_t {
  contiguous,
  permuted,  // [B, H, T, D] tensors permuted to [B, T, H, D] views
  sliced,    // [B, T + 3, H, 2 D] tensors sliced to rows 1..T and every other column
};

inline const char* layout_name(Layout l) {
  switch (l) {
    case Layout::contiguous:
      return "contiguous";
    case Layout::permuted:
      return "permuted";
    case Layout::sliced:
      return "sliced";
  }
  return "?";
}

inline const char* causal_name(Causal c) {
  switch (c) {
    case Causal::none:
      return "none";
    case Causal::top_left:
      return "top_left";
    case Causal::bottom_right:
      return "bottom_right";
  }
  return "?";
}

struct Case {
  std::int64_t B = 1, Tq = 5, Tk = 5, Hq = 2, Hk = 2, D = 4, Dv = 4;
  Causal causal = Causal::none;
  Window window;
  bool padding = false;  // key and query lengths below Tk and Tq (every key of the last batch
                         // when B >= 3)
  Broadcast mask = Broadcast::none;
  Broadcast bias = Broadcast::none;
  bool alibi = false;
  double softcap = 0.0;
  double dropout = 0.0;
  std::optional<double> scale;
  Layout layout = Layout::contiguous;
  std::uint64_t seed = 1;

  // A valid GoogleTest name: letters, digits and underscores only.
  std::string name() const {
    std::ostringstream s;
    s << "B" << B << "_Tq" << Tq << "_Tk" << Tk << "_Hq" << Hq << "_Hk" << Hk << "_D" << D << "_Dv"
      << Dv;
    if (causal == Causal::top_left) s << "_causalTL";
    if (causal == Causal::bottom_right) s << "_causalBR";
    if (window.left >= 0 || window.right >= 0) {
      auto side = [](std::int64_t w) { return w < 0 ? std::string("inf") : std::to_string(w); };
      s << "_win" << side(window.left) << "_" << side(window.right);
    }
    if (padding) s << "_pad";
    if (mask != Broadcast::none) s << "_mask" << broadcast_name(mask);
    if (bias != Broadcast::none) s << "_bias" << broadcast_name(bias);
    if (alibi) s << "_alibi";
    if (softcap > 0) s << "_softcap" << static_cast<int>(std::lround(softcap * 100));
    if (dropout > 0) s << "_dropout" << static_cast<int>(std::lround(dropout * 100));
    if (scale) {
      // Test names allow no minus sign or point: "_scale37" is 0.37, "_scalem150" is -1.5.
      s << "_scale" << (*scale < 0 ? "m" : "") << std::lround(std::fabs(*scale) * 100);
    }
    if (layout != Layout::contiguous) s << "_" << layout_name(layout);
    s << "_seed" << seed;
    return s.str();
  }
};

inline void PrintTo(const Case& c, std::ostream* os) { *os << c.name(); }

inline std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return info.param.name();
}

// Every option, for SCOPED_TRACE: a failing case says exactly what it ran.
inline std::string describe(const AttentionOptions& o) {
  std::ostringstream s;
  s.precision(17);
  s << "options{scale=";
  if (o.scale) {
    s << *o.scale;
  } else {
    s << "default";
  }
  s << " causal=" << causal_name(o.causal) << " window={" << o.window.left << "," << o.window.right
    << "} key_lengths=[";
  for (const std::int64_t n : o.key_lengths) s << n << " ";
  s << "] query_lengths=[";
  for (const std::int64_t n : o.query_lengths) s << n << " ";
  s << "] mask=" << (o.mask.defined() ? o.mask.describe() : "undefined")
    << " bias=" << (o.bias.defined() ? o.bias.describe() : "undefined") << " alibi_slopes=[";
  for (const double x : o.alibi_slopes) s << x << " ";
  s << "] softcap=" << o.softcap << " dropout_p=" << o.dropout_p << " seed=" << o.seed
    << " offset=" << o.offset << " backend=" << static_cast<int>(o.backend) << "}";
  return s.str();
}

struct Problem {
  Tensor q, k, v;
  Tensor dout;  // [B, Tq, Hq, Dv]: the G of L = sum(out * G)
  AttentionOptions options;

  std::string describe() const {
    return "q=" + q.describe() + " k=" + k.describe() + " v=" + v.describe() + " " +
           testing::describe(options);
  }
};

inline Shape broadcast_shape(Broadcast s, const Case& c) {
  switch (s) {
    case Broadcast::none:
      return {};
    case Broadcast::tk:
      return {c.Tk};
    case Broadcast::tq_tk:
      return {c.Tq, c.Tk};
    case Broadcast::h_tq_tk:
      return {c.Hq, c.Tq, c.Tk};
    case Broadcast::h_tk:
      return {1, c.Hq, 1, c.Tk};
    case Broadcast::b_tq_tk:
      return {c.B, 1, c.Tq, c.Tk};
    case Broadcast::full:
      return {c.B, c.Hq, c.Tq, c.Tk};
  }
  return {};
}

inline std::int64_t numel_of(const Shape& shape) {
  std::int64_t n = 1;
  for (const std::int64_t s : shape) n *= s;
  return n;
}

// A tensor of `shape` and dtype whose values come from fill (row-major), stored transposed in
// its last two dimensions when `strided` so that the kernel must honour the strides.
inline Tensor make_with_layout(const Shape& shape, const std::vector<double>& values, DType dtype,
                               bool strided) {
  const auto rank = static_cast<std::int64_t>(shape.size());
  if (!strided || rank < 2) return Tensor::from_values(shape, values, dtype);
  Shape swapped = shape;
  std::swap(swapped[rank - 2], swapped[rank - 1]);
  Tensor t = Tensor::zeros(swapped, dtype).transpose(rank - 2, rank - 1);
  t.copy_from(Tensor::from_values(shape, values, DType::f64));
  return t;
}

// Random inputs of the case in dtype (f64 normals rounded to it) with its options; the backend
// is the reference, which is what these tests are about.
inline Problem make_problem(const Case& c, DType dtype) {
  Generator g(c.seed);
  Problem p;
  auto make = [&](std::int64_t t, std::int64_t h, std::int64_t dim) {
    switch (c.layout) {
      case Layout::contiguous:
        return Tensor::randn({c.B, t, h, dim}, g, DType::f64).to(dtype);
      case Layout::permuted:
        return Tensor::randn({c.B, h, t, dim}, g, DType::f64).to(dtype).permute({0, 2, 1, 3});
      case Layout::sliced:
        return Tensor::randn({c.B, t + 3, h, 2 * dim}, g, DType::f64)
            .to(dtype)
            .slice(1, 1, 1 + t)
            .slice(3, 0, 2 * dim, 2);
    }
    return Tensor();
  };
  p.q = make(c.Tq, c.Hq, c.D);
  p.k = make(c.Tk, c.Hk, c.D);
  p.v = make(c.Tk, c.Hk, c.Dv);
  p.dout = Tensor::randn({c.B, c.Tq, c.Hq, c.Dv}, g, DType::f64).to(dtype);
  AttentionOptions& o = p.options;
  o.backend = Backend::reference;
  o.scale = c.scale;
  o.causal = c.causal;
  o.window = c.window;
  if (c.padding) {
    for (std::int64_t b = 0; b < c.B; ++b) {
      const bool last = c.B >= 3 && b == c.B - 1;
      o.key_lengths.push_back(last ? 0 : std::max<std::int64_t>(c.Tk - 1 - 2 * b, 0));
      o.query_lengths.push_back(std::max<std::int64_t>(c.Tq - 1 - b % 2, 0));
    }
  }
  const bool strided = c.layout != Layout::contiguous;
  if (c.mask != Broadcast::none) {
    const Shape shape = broadcast_shape(c.mask, c);
    std::vector<double> keep(static_cast<std::size_t>(numel_of(shape)));
    for (double& x : keep) x = g.next_uniform() < 0.75 ? 1.0 : 0.0;
    o.mask = make_with_layout(shape, keep, DType::boolean, strided);
  }
  if (c.bias != Broadcast::none) {
    const Shape shape = broadcast_shape(c.bias, c);
    std::vector<double> values(static_cast<std::size_t>(numel_of(shape)));
    for (double& x : values) x = g.next_normal();
    o.bias = make_with_layout(shape, values, dtype, strided);
  }
  if (c.alibi) {
    // Geometric slopes as in the ALiBi paper, steep enough to move the softmax at these lengths.
    for (std::int64_t h = 0; h < c.Hq; ++h) o.alibi_slopes.push_back(std::pow(0.5, 0.5 * (h + 1)));
  }
  o.softcap = c.softcap;
  o.dropout_p = c.dropout;
  o.seed = 0x9E3779B97F4A7C15ull ^ c.seed;
  o.offset = (c.seed << 33) + 5;  // high bits too: they enter the Philox key
  return p;
}

// Cases with every size and option drawn at random (deterministically from `seed`), sizes up to
// max_t for lengths and max_d for head dims: the corners a hand-written list forgets.
inline std::vector<Case> random_cases(int count, std::uint64_t seed, std::int64_t max_t,
                                      std::int64_t max_d) {
  Generator g(seed);
  auto pick = [&g](std::int64_t low, std::int64_t high) {  // uniform in [low, high]
    return low + static_cast<std::int64_t>(g.next_uniform() * static_cast<double>(high - low + 1));
  };
  constexpr Broadcast kShapes[] = {Broadcast::none,    Broadcast::tk,   Broadcast::tq_tk,
                                   Broadcast::h_tq_tk, Broadcast::h_tk, Broadcast::b_tq_tk,
                                   Broadcast::full};
  std::vector<Case> cases;
  for (int n = 0; n < count; ++n) {
    Case c;
    c.B = pick(1, 3);
    c.Tq = pick(1, max_t);
    c.Tk = pick(1, max_t);
    c.Hk = pick(1, 2);
    c.Hq = c.Hk * pick(1, 3);
    c.D = pick(1, max_d);
    c.Dv = pick(1, max_d);
    c.causal = static_cast<Causal>(pick(0, 2));
    c.window = {pick(-1, 3), pick(-1, 3)};
    c.padding = pick(0, 1) == 1;
    c.mask = kShapes[pick(0, 6)];
    c.bias = kShapes[pick(0, 6)];
    c.alibi = pick(0, 1) == 1;
    c.softcap = pick(0, 1) == 1 ? 0.5 * static_cast<double>(pick(1, 6)) : 0.0;
    c.dropout = 0.2 * static_cast<double>(pick(0, 3));
    if (pick(0, 1) == 1) c.scale = 0.25 * static_cast<double>(pick(1, 6));
    c.layout = static_cast<Layout>(pick(0, 2));
    c.seed = seed * 1000 + static_cast<std::uint64_t>(n);
    cases.push_back(c);
  }
  return cases;
}

// Visits every index of shape in row-major order.
inline void for_each_index(const Shape& shape, const std::function<void(const Shape&)>& fn) {
  for (const std::int64_t s : shape) {
    if (s == 0) return;
  }
  Shape index(shape.size(), 0);
  while (true) {
    fn(index);
    std::size_t d = shape.size();
    while (true) {
      if (d == 0) return;
      --d;
      if (++index[d] < shape[d]) break;
      index[d] = 0;
    }
  }
}

// Element (b, h, i, j) of a tensor broadcast to [B, Hq, Tq, Tk]: dimensions aligned from the
// right, a size-1 dimension repeating.
inline double broadcast_at(const Tensor& t, std::int64_t b, std::int64_t h, std::int64_t i,
                           std::int64_t j) {
  const std::int64_t full[4] = {b, h, i, j};
  Shape index(static_cast<std::size_t>(t.dim()));
  for (std::int64_t d = 0; d < t.dim(); ++d) {
    index[d] = t.size(d) == 1 ? 0 : full[4 - t.dim() + d];
  }
  return t.at(index);
}

// The oracle's results, row-major in the canonical layouts.
struct Dense {
  std::int64_t B = 0, Tq = 0, Tk = 0, Hq = 0, Dv = 0;
  std::vector<long double> out;  // [B, Tq, Hq, Dv]
  std::vector<long double> lse;  // [B, Hq, Tq]
  std::vector<long double> p;    // [B, Hq, Tq, Tk], before dropout
  std::vector<char> keep;        // [B, Hq, Tq, Tk], the keep-mask of step 3

  std::size_t bhij(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) const {
    return static_cast<std::size_t>(((b * Hq + h) * Tq + i) * Tk + j);
  }
  // Whether row i of head h in batch b keeps no key at all.
  bool row_empty(std::int64_t b, std::int64_t h, std::int64_t i) const {
    return std::isinf(lse[static_cast<std::size_t>((b * Hq + h) * Tq + i)]);
  }
};

// Attention straight from the numbered semantics of qkv/attention.hpp, in long double.
inline Dense dense_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                             const AttentionOptions& o) {
  using LD = long double;
  Dense r;
  r.B = q.size(0);
  r.Tq = q.size(1);
  r.Hq = q.size(2);
  r.Tk = k.size(1);
  r.Dv = v.size(3);
  const std::int64_t D = q.size(3);
  const std::int64_t Hk = k.size(2);
  const LD scale = o.scale ? static_cast<LD>(*o.scale) : 1.0L / std::sqrt(static_cast<LD>(D));
  const auto n_scores = static_cast<std::size_t>(r.B * r.Hq * r.Tq * r.Tk);
  r.out.assign(static_cast<std::size_t>(r.B * r.Tq * r.Hq * r.Dv), 0.0L);
  r.lse.assign(static_cast<std::size_t>(r.B * r.Hq * r.Tq), 0.0L);
  r.p.assign(n_scores, 0.0L);
  r.keep.assign(n_scores, 0);
  std::vector<LD> s(static_cast<std::size_t>(r.Tk));
  for (std::int64_t b = 0; b < r.B; ++b) {
    const std::int64_t tq = o.query_lengths.empty() ? r.Tq : o.query_lengths[b];
    const std::int64_t tk = o.key_lengths.empty() ? r.Tk : o.key_lengths[b];
    for (std::int64_t h = 0; h < r.Hq; ++h) {
      const std::int64_t hk = h / (r.Hq / Hk);
      for (std::int64_t i = 0; i < r.Tq; ++i) {
        const std::int64_t diagonal = i + tk - tq;
        LD m = -std::numeric_limits<LD>::infinity();
        for (std::int64_t j = 0; j < r.Tk; ++j) {
          bool keep = j < tk && i < tq;
          if (o.causal == Causal::top_left) keep = keep && j <= i;
          if (o.causal == Causal::bottom_right) keep = keep && j <= diagonal;
          if (o.window.left >= 0) keep = keep && j >= diagonal - o.window.left;
          if (o.window.right >= 0) keep = keep && j <= diagonal + o.window.right;
          if (o.mask.defined()) keep = keep && broadcast_at(o.mask, b, h, i, j) != 0.0;
          r.keep[r.bhij(b, h, i, j)] = keep;
          if (!keep) continue;
          LD dot = 0;
          for (std::int64_t c = 0; c < D; ++c) {
            dot += static_cast<LD>(q.at({b, i, h, c})) * static_cast<LD>(k.at({b, j, hk, c}));
          }
          LD score = scale * dot;
          if (o.softcap > 0) {
            const LD cap = o.softcap;
            score = cap * std::tanh(score / cap);
          }
          if (o.bias.defined()) score += broadcast_at(o.bias, b, h, i, j);
          if (!o.alibi_slopes.empty()) {
            score -= static_cast<LD>(o.alibi_slopes[h]) * std::fabs(static_cast<LD>(diagonal - j));
          }
          s[j] = score;
          m = std::max(m, score);
        }
        const auto row = static_cast<std::size_t>((b * r.Hq + h) * r.Tq + i);
        if (m == -std::numeric_limits<LD>::infinity()) {
          r.lse[row] = m;
          continue;
        }
        LD sum = 0;
        for (std::int64_t j = 0; j < r.Tk; ++j) {
          if (r.keep[r.bhij(b, h, i, j)]) sum += std::exp(s[j] - m);
        }
        r.lse[row] = m + std::log(sum);
        for (std::int64_t j = 0; j < r.Tk; ++j) {
          if (!r.keep[r.bhij(b, h, i, j)]) continue;
          const LD p = std::exp(s[j] - m) / sum;
          r.p[r.bhij(b, h, i, j)] = p;
          LD z = 1;
          if (o.dropout_p > 0) {
            const bool kept = dropout_keep(
                o.seed, o.offset, static_cast<std::uint32_t>(b * r.Hq + h),
                static_cast<std::uint32_t>(i), static_cast<std::uint32_t>(j), o.dropout_p);
            z = kept ? 1.0L / (1.0L - static_cast<LD>(o.dropout_p)) : 0.0L;
          }
          for (std::int64_t c = 0; c < r.Dv; ++c) {
            r.out[static_cast<std::size_t>(((b * r.Tq + i) * r.Hq + h) * r.Dv + c)] +=
                p * z * static_cast<LD>(v.at({b, j, hk, c}));
          }
        }
      }
    }
  }
  return r;
}

// Compares a tensor (read row-major) with expected values: |actual - expected| must stay within
// atol + rtol |expected|; infinities must match exactly; NaN never passes. Reports the worst
// element and how many failed.
inline ::testing::AssertionResult all_close(const char* what, const Tensor& actual,
                                            const std::vector<long double>& expected, double rtol,
                                            double atol) {
  const std::vector<double> a = actual.to_vector();
  if (a.size() != expected.size()) {
    return ::testing::AssertionFailure()
           << what << ": " << a.size() << " elements, expected " << expected.size();
  }
  std::size_t failures = 0;
  std::size_t worst = 0;
  double worst_ratio = 0;
  for (std::size_t n = 0; n < a.size(); ++n) {
    const double e = static_cast<double>(expected[n]);
    double ratio;
    if (std::isinf(e) || std::isinf(a[n])) {
      ratio = a[n] == e ? 0.0 : std::numeric_limits<double>::infinity();
    } else if (std::isnan(a[n]) || std::isnan(e)) {
      ratio = std::numeric_limits<double>::infinity();
    } else {
      ratio = std::fabs(a[n] - e) / (atol + rtol * std::fabs(e));
    }
    if (!(ratio <= 1.0)) ++failures;
    if (!(ratio <= worst_ratio)) {
      worst_ratio = ratio;
      worst = n;
    }
  }
  if (failures == 0) return ::testing::AssertionSuccess();
  std::ostringstream m;
  m.precision(17);
  m << what << ": " << failures << " of " << a.size() << " elements off (atol " << atol << ", rtol "
    << rtol << "); worst at flat index " << worst << ": got " << a[worst] << ", expected "
    << static_cast<double>(expected[worst]) << " (" << worst_ratio << "x the tolerance)";
  return ::testing::AssertionFailure() << m.str();
}

inline std::vector<long double> widen(const std::vector<double>& x) { return {x.begin(), x.end()}; }

}  // namespace qkv::testing
