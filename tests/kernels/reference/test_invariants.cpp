// Properties the reference must have whatever the numbers: causality, padding that never leaks,
// invariance under a joint permutation of keys and values, probability rows, stability at large
// scores, rows without keys (out 0, lse -inf, zero gradients, never NaN), dropout's rate and
// exact realization through the API, seeds and offsets, determinism, and equivalences between
// options (GQA and repeated heads, mask and -inf bias, window and causal).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/reference/oracle.hpp"

namespace qkv::testing {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

AttentionOptions reference_options() {
  AttentionOptions o;
  o.backend = Backend::reference;
  return o;
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = a.to_vector();
  const std::vector<double> y = b.to_vector();
  return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(double)) == 0;
}

// Row (b, i, h) of out [B, Tq, Hq, Dv].
std::vector<double> out_row(const Tensor& out, std::int64_t b, std::int64_t i, std::int64_t h) {
  std::vector<double> row;
  for (std::int64_t c = 0; c < out.size(3); ++c) row.push_back(out.at({b, i, h, c}));
  return row;
}

// Overwrites position j of dimension 1 (T) of a [B, T, H, D] tensor, in batch b, with new
// values far from the old ones.
void scramble_position(Tensor& t, std::int64_t b, std::int64_t j, Generator& g) {
  for (std::int64_t h = 0; h < t.size(2); ++h) {
    for (std::int64_t c = 0; c < t.size(3); ++c) t.set({b, j, h, c}, 50.0 * g.next_normal());
  }
}

bool all_finite(const Tensor& t) {
  for (const double x : t.to_vector()) {
    if (!std::isfinite(x)) return false;
  }
  return true;
}

// ---------------------------------------------------------------------------------------------
// Causality: a key after the causal limit of row i changes nothing in row i, and a key within it
// does change row i (so the comparison is not vacuous).

struct CausalCase {
  Causal causal;
  std::int64_t Tq, Tk;
};

void PrintTo(const CausalCase& c, std::ostream* os) {
  *os << causal_name(c.causal) << " Tq=" << c.Tq << " Tk=" << c.Tk;
}

class CausalFuture : public ::testing::TestWithParam<CausalCase> {};

TEST_P(CausalFuture, RowIgnoresKeysAfterItsLimit) {
  const CausalCase& cc = GetParam();
  Case c;
  c.B = 2, c.Tq = cc.Tq, c.Tk = cc.Tk, c.Hq = 2, c.Hk = 1, c.causal = cc.causal, c.alibi = true;
  c.bias = Broadcast::h_tq_tk;
  const Problem p = make_problem(c, DType::f64);
  SCOPED_TRACE(p.describe());
  const AttentionOutput base = attention_forward(p.q, p.k, p.v, p.options);
  Generator g(77);
  for (std::int64_t j = 0; j < c.Tk; ++j) {
    Tensor k = p.k.clone();
    Tensor v = p.v.clone();
    scramble_position(k, 1, j, g);
    scramble_position(v, 1, j, g);
    const AttentionOutput f = attention_forward(p.q, k, v, p.options);
    for (std::int64_t i = 0; i < c.Tq; ++i) {
      // The limit straight from the definitions in attention.hpp.
      const std::int64_t limit = cc.causal == Causal::top_left ? i : i + c.Tk - c.Tq;
      for (std::int64_t h = 0; h < c.Hq; ++h) {
        SCOPED_TRACE("j=" + std::to_string(j) + " i=" + std::to_string(i));
        EXPECT_EQ(out_row(f.out, 0, i, h), out_row(base.out, 0, i, h)) << "other batch changed";
        if (j > limit) {
          EXPECT_EQ(out_row(f.out, 1, i, h), out_row(base.out, 1, i, h));
          EXPECT_EQ(f.lse.at({1, h, i}), base.lse.at({1, h, i}));
        } else {
          EXPECT_NE(out_row(f.out, 1, i, h), out_row(base.out, 1, i, h));
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Alignments, CausalFuture,
                         ::testing::Values(CausalCase{Causal::top_left, 5, 5},
                                           CausalCase{Causal::top_left, 3, 7},
                                           CausalCase{Causal::top_left, 7, 3},
                                           CausalCase{Causal::bottom_right, 5, 5},
                                           CausalCase{Causal::bottom_right, 3, 7},
                                           CausalCase{Causal::bottom_right, 7, 3}),
                         [](const ::testing::TestParamInfo<CausalCase>& info) {
                           return std::string(info.param.causal == Causal::top_left ? "TL" : "BR") +
                                  "_Tq" + std::to_string(info.param.Tq) + "_Tk" +
                                  std::to_string(info.param.Tk);
                         });

// ---------------------------------------------------------------------------------------------
// Padding.

// Whatever sits in k, v, the mask or the bias at padded keys j >= key_lengths[b] never reaches
// the output, with the length-dependent options (bottom-right causal, ALiBi) on.
TEST(Padding, PaddedKeysNeverChangeTheOutput) {
  Case c;
  c.B = 3, c.Tq = 4, c.Tk = 7, c.Hq = 2, c.Hk = 2, c.padding = true, c.alibi = true;
  c.causal = Causal::bottom_right, c.bias = Broadcast::full, c.mask = Broadcast::b_tq_tk;
  Problem p = make_problem(c, DType::f64);
  p.options.key_lengths = {7, 4, 1};
  p.options.query_lengths = {};
  SCOPED_TRACE(p.describe());
  const AttentionOutput base = attention_forward(p.q, p.k, p.v, p.options);
  Problem changed = p;
  changed.k = p.k.clone();
  changed.v = p.v.clone();
  changed.options.bias = p.options.bias.clone();
  changed.options.mask = p.options.mask.clone();
  Generator g(5);
  int scrambled = 0;
  for (std::int64_t b = 0; b < c.B; ++b) {
    for (std::int64_t j = p.options.key_lengths[b]; j < c.Tk; ++j, ++scrambled) {
      scramble_position(changed.k, b, j, g);
      scramble_position(changed.v, b, j, g);
      for (std::int64_t i = 0; i < c.Tq; ++i) {
        changed.options.mask.set({b, 0, i, j}, 1.0);
        for (std::int64_t h = 0; h < c.Hq; ++h) changed.options.bias.set({b, h, i, j}, 1e3);
      }
    }
  }
  ASSERT_GT(scrambled, 0);
  const AttentionOutput f = attention_forward(changed.q, changed.k, changed.v, changed.options);
  EXPECT_TRUE(bitwise_equal(f.out, base.out));
  EXPECT_TRUE(bitwise_equal(f.lse, base.lse));
  // The same change within the valid keys does change the output.
  scramble_position(changed.k, 0, 0, g);
  EXPECT_FALSE(bitwise_equal(
      attention_forward(changed.q, changed.k, changed.v, changed.options).out, base.out));
}

// Rows i >= query_lengths[b] give out 0, lse -inf and zero dq, and their q never matters.
TEST(Padding, PaddedQueryRowsAreEmpty) {
  Case c;
  c.B = 2, c.Tq = 6, c.Tk = 5, c.Hq = 2, c.Hk = 1, c.alibi = true, c.causal = Causal::bottom_right;
  Problem p = make_problem(c, DType::f64);
  p.options.query_lengths = {4, 1};
  SCOPED_TRACE(p.describe());
  const AttentionOutput f = attention_forward(p.q, p.k, p.v, p.options);
  const AttentionGrads g = attention_backward(p.dout, p.q, p.k, p.v, f.out, f.lse, p.options);
  Tensor q2 = p.q.clone();
  Generator gen(9);
  for (std::int64_t b = 0; b < c.B; ++b) {
    for (std::int64_t i = p.options.query_lengths[b]; i < c.Tq; ++i) {
      scramble_position(q2, b, i, gen);
      for (std::int64_t h = 0; h < c.Hq; ++h) {
        EXPECT_EQ(out_row(f.out, b, i, h), std::vector<double>(c.Dv, 0.0));
        EXPECT_EQ(f.lse.at({b, h, i}), -kInf);
        for (std::int64_t d = 0; d < c.D; ++d) EXPECT_EQ(g.dq.at({b, i, h, d}), 0.0);
      }
    }
  }
  const AttentionOutput f2 = attention_forward(q2, p.k, p.v, p.options);
  EXPECT_TRUE(bitwise_equal(f2.out, f.out));
  EXPECT_TRUE(bitwise_equal(f2.lse, f.lse));
}

// ---------------------------------------------------------------------------------------------
// Permuting the keys and values together (and the mask and bias along Tk) permutes nothing in
// the output: attention is a function of the set of (key, value) pairs.

// t with its dimension `dim` reordered: result[..., j, ...] = t[..., perm[j], ...].
Tensor permute_along(const Tensor& t, std::int64_t dim, const std::vector<std::int64_t>& perm) {
  Tensor r = t.clone();
  for_each_index(t.shape(), [&](const Shape& index) {
    Shape from = index;
    from[dim] = perm[index[dim]];
    r.set(index, t.at(from));
  });
  return r;
}

TEST(Permutation, JointKeyValuePermutationLeavesOutputUnchanged) {
  Case c;
  c.B = 2, c.Tq = 5, c.Tk = 8, c.Hq = 4, c.Hk = 2, c.D = 3, c.Dv = 4;
  c.mask = Broadcast::full, c.bias = Broadcast::tq_tk, c.softcap = 1.5;
  const Problem p = make_problem(c, DType::f64);
  SCOPED_TRACE(p.describe());
  std::vector<std::int64_t> perm = {3, 7, 0, 5, 1, 6, 2, 4};
  Problem q = p;
  q.k = permute_along(p.k, 1, perm);
  q.v = permute_along(p.v, 1, perm);
  q.options.mask = permute_along(p.options.mask, 3, perm);
  q.options.bias = permute_along(p.options.bias, 1, perm);
  const AttentionOutput f = attention_forward(p.q, p.k, p.v, p.options);
  const AttentionOutput fp = attention_forward(q.q, q.k, q.v, q.options);
  // Only the summation order differs.
  EXPECT_TRUE(all_close("out", fp.out, widen(f.out.to_vector()), 1e-13, 1e-13));
  EXPECT_TRUE(all_close("lse", fp.lse, widen(f.lse.to_vector()), 1e-13, 1e-13));
  const Tensor w = attention_weights(p.q, p.k, p.options);
  const Tensor wp = attention_weights(q.q, q.k, q.options);
  EXPECT_TRUE(all_close("weights", wp, widen(permute_along(w, 3, perm).to_vector()), 1e-13, 1e-13));
  // dk, dv follow their keys.
  const AttentionGrads g = attention_backward(p.dout, p.q, p.k, p.v, f.out, f.lse, p.options);
  const AttentionGrads gp = attention_backward(q.dout, q.q, q.k, q.v, fp.out, fp.lse, q.options);
  EXPECT_TRUE(all_close("dq", gp.dq, widen(g.dq.to_vector()), 1e-12, 1e-13));
  EXPECT_TRUE(
      all_close("dk", gp.dk, widen(permute_along(g.dk, 1, perm).to_vector()), 1e-12, 1e-13));
  EXPECT_TRUE(
      all_close("dv", gp.dv, widen(permute_along(g.dv, 1, perm).to_vector()), 1e-12, 1e-13));
}

// ---------------------------------------------------------------------------------------------
// attention_weights rows are probability distributions: entries in [0, 1], exactly 0 where a key
// is dropped, summing to 1, or to exactly 0 on a row that keeps no key.

class WeightRows : public ::testing::TestWithParam<Case> {};

TEST_P(WeightRows, SumToOneOrZero) {
  const Case& c = GetParam();
  for (const DType dtype : {DType::f64, DType::f32}) {
    const Problem p = make_problem(c, dtype);
    SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + p.describe());
    // The keep-mask and empty rows from the oracle, which builds them from the definitions.
    const Dense ref = dense_attention(p.q, p.k, p.v, p.options);
    const Tensor w = attention_weights(p.q, p.k, p.options);
    const double tol = dtype == DType::f64 ? 1e-14 : 1e-6;
    int empty = 0;
    for (std::int64_t b = 0; b < c.B; ++b) {
      for (std::int64_t h = 0; h < c.Hq; ++h) {
        for (std::int64_t i = 0; i < c.Tq; ++i) {
          double sum = 0;
          for (std::int64_t j = 0; j < c.Tk; ++j) {
            const double x = w.at({b, h, i, j});
            EXPECT_GE(x, 0.0);
            EXPECT_LE(x, 1.0);
            if (!ref.keep[ref.bhij(b, h, i, j)]) {
              EXPECT_EQ(x, 0.0) << "b=" << b << " h=" << h << " i=" << i << " j=" << j;
            }
            sum += x;
          }
          if (ref.row_empty(b, h, i)) {
            ++empty;
            EXPECT_EQ(sum, 0.0) << "b=" << b << " h=" << h << " i=" << i;
          } else {
            EXPECT_NEAR(sum, 1.0, tol) << "b=" << b << " h=" << h << " i=" << i;
          }
        }
      }
    }
    RecordProperty("empty_rows", empty);
  }
}

std::vector<Case> weight_cases() {
  std::vector<Case> cases;
  Case c;
  c.B = 3, c.Tq = 7, c.Tk = 5, c.Hq = 4, c.Hk = 2;
  c.seed = 301;
  cases.push_back(c);
  c.causal = Causal::bottom_right, c.padding = true, c.mask = Broadcast::h_tk, c.seed = 302;
  cases.push_back(c);
  c.window = {1, 0}, c.bias = Broadcast::full, c.alibi = true, c.softcap = 0.9, c.seed = 303;
  c.dropout = 0.5;  // the weights are before dropout: rows still sum to 1
  cases.push_back(c);
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Composed, WeightRows, ::testing::ValuesIn(weight_cases()), case_name);

// ---------------------------------------------------------------------------------------------
// Scores of magnitude 1e4: integer q and k with scale 1 make every score an integer that f32
// holds exactly, so f32 and f64 both must match the oracle closely, with nothing overflowing.

TEST(Stability, ScoresOfMagnitude1e4) {
  const std::int64_t B = 2, Tq = 5, Tk = 6, H = 2, D = 4, Dv = 3;
  Generator g(11);
  auto integers = [&](Shape shape, double half_range) {
    std::vector<double> values(static_cast<std::size_t>(numel_of(shape)));
    for (double& x : values) x = std::round((2 * g.next_uniform() - 1) * half_range);
    return Tensor::from_values(std::move(shape), values, DType::f64);
  };
  const Tensor q = integers({B, Tq, H, D}, 60);
  const Tensor k = integers({B, Tk, H, D}, 60);
  const Tensor v = Tensor::randn({B, Tk, H, Dv}, g, DType::f64);
  const Tensor dout = Tensor::randn({B, Tq, H, Dv}, g, DType::f64);
  for (const bool softcapped : {false, true}) {
    AttentionOptions o = reference_options();
    o.scale = 1.0;
    o.bias = integers({Tq, Tk}, 1e4);
    if (softcapped) o.softcap = 3e3;
    const Dense ref = dense_attention(q, k, v, o);
    double largest = 0;
    for (std::int64_t b = 0; b < B; ++b) {
      for (std::int64_t h = 0; h < H; ++h) {
        for (std::int64_t i = 0; i < Tq; ++i) {
          largest =
              std::max(largest, std::fabs(static_cast<double>(
                                    ref.lse[static_cast<std::size_t>((b * H + h) * Tq + i)])));
        }
      }
    }
    ASSERT_GT(largest, 5e3) << "the scores must be large for this test to mean anything";
    for (const DType dtype : {DType::f64, DType::f32}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + describe(o));
      AttentionOptions od = o;
      od.bias = o.bias.to(dtype);
      const Tensor qd = q.to(dtype), kd = k.to(dtype), vd = v.to(dtype);
      const AttentionOutput f = attention_forward(qd, kd, vd, od);
      // f32's tanh and exp are good to a few ulps of 1e4-sized arguments when softcapped.
      const double tol = dtype == DType::f64 ? 1e-12 : softcapped ? 1e-3 : 1e-5;
      EXPECT_TRUE(all_close("out", f.out, ref.out, tol, tol));
      EXPECT_TRUE(all_close("lse", f.lse, ref.lse, dtype == DType::f64 ? 1e-14 : 1e-7, 0));
      const AttentionGrads gr = attention_backward(dout.to(dtype), qd, kd, vd, f.out, f.lse, od);
      EXPECT_TRUE(all_finite(gr.dq));
      EXPECT_TRUE(all_finite(gr.dk));
      EXPECT_TRUE(all_finite(gr.dv));
      EXPECT_TRUE(all_finite(gr.dbias));
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Rows that keep no key, from each way a row can lose all its keys.

enum class EmptyBy : std::uint8_t {
  mask,
  key_lengths,
  bottom_right,
  window,
  no_keys,
  minus_inf_bias
};

const char* empty_by_name(EmptyBy e) {
  switch (e) {
    case EmptyBy::mask:
      return "mask";
    case EmptyBy::key_lengths:
      return "key_lengths";
    case EmptyBy::bottom_right:
      return "bottom_right";
    case EmptyBy::window:
      return "window";
    case EmptyBy::no_keys:
      return "no_keys";
    case EmptyBy::minus_inf_bias:
      return "minus_inf_bias";
  }
  return "?";
}

void PrintTo(EmptyBy e, std::ostream* os) { *os << empty_by_name(e); }

class EmptyRows : public ::testing::TestWithParam<EmptyBy> {};

TEST_P(EmptyRows, GiveZeroOutMinusInfLseZeroGradientsNoNaN) {
  const EmptyBy by = GetParam();
  Case c;
  c.B = 2, c.Tq = 5, c.Tk = 4, c.Hq = 2, c.Hk = 1, c.D = 3, c.Dv = 2;
  c.bias = Broadcast::full, c.alibi = true, c.softcap = 2.0, c.dropout = 0.2;
  if (by == EmptyBy::no_keys) c.Tk = 0;
  for (const DType dtype : {DType::f64, DType::f32}) {
    Problem p = make_problem(c, dtype);
    AttentionOptions& o = p.options;
    switch (by) {
      case EmptyBy::mask:  // row 2 of batch 1, head 0
        o.mask = Tensor::full({c.B, c.Hq, c.Tq, c.Tk}, 1.0, DType::boolean);
        for (std::int64_t j = 0; j < c.Tk; ++j) o.mask.set({1, 0, 2, j}, 0.0);
        break;
      case EmptyBy::key_lengths:  // every row of batch 1
        o.key_lengths = {c.Tk, 0};
        break;
      case EmptyBy::bottom_right:  // rows i < Tq - Tk
        o.causal = Causal::bottom_right;
        break;
      case EmptyBy::window:  // diagonal i - 1 (Tq = 5, Tk = 4): row 0's band [-2, -1] is empty
        o.window = {1, 0};
        break;
      case EmptyBy::no_keys:
        break;
      case EmptyBy::minus_inf_bias:  // every kept key of row 3, batch 0, head 1 scores -inf
        for (std::int64_t j = 0; j < c.Tk; ++j) o.bias.set({0, 1, 3, j}, -kInf);
        break;
    }
    SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + p.describe());
    const Dense ref = dense_attention(p.q, p.k, p.v, o);
    int empty = 0;
    const AttentionOutput f = attention_forward(p.q, p.k, p.v, o);
    const AttentionGrads g = attention_backward(p.dout, p.q, p.k, p.v, f.out, f.lse, o);
    const Tensor w = attention_weights(p.q, p.k, o);
    for (std::int64_t b = 0; b < c.B; ++b) {
      for (std::int64_t h = 0; h < c.Hq; ++h) {
        for (std::int64_t i = 0; i < c.Tq; ++i) {
          if (!ref.row_empty(b, h, i)) continue;
          ++empty;
          SCOPED_TRACE("b=" + std::to_string(b) + " h=" + std::to_string(h) +
                       " i=" + std::to_string(i));
          EXPECT_EQ(out_row(f.out, b, i, h), std::vector<double>(c.Dv, 0.0));
          EXPECT_EQ(f.lse.at({b, h, i}), -kInf);
          for (std::int64_t d = 0; d < c.D; ++d) EXPECT_EQ(g.dq.at({b, i, h, d}), 0.0);
          for (std::int64_t j = 0; j < c.Tk; ++j) EXPECT_EQ(w.at({b, h, i, j}), 0.0);
        }
      }
    }
    EXPECT_GT(empty, 0) << "the case must produce at least one empty row";
    for (const double x : f.lse.to_vector()) EXPECT_FALSE(std::isnan(x));
    EXPECT_TRUE(all_finite(f.out));
    EXPECT_TRUE(all_finite(g.dq));
    EXPECT_TRUE(all_finite(g.dk));
    EXPECT_TRUE(all_finite(g.dv));
    EXPECT_TRUE(all_finite(w));
    // dbias is finite and zero at every entry whose key is dropped.
    for (std::int64_t b = 0; b < c.B; ++b) {
      for (std::int64_t h = 0; h < c.Hq; ++h) {
        for (std::int64_t i = 0; i < c.Tq; ++i) {
          for (std::int64_t j = 0; j < c.Tk; ++j) {
            const double x = g.dbias.at({b, h, i, j});
            EXPECT_TRUE(std::isfinite(x));
            if (!ref.keep[ref.bhij(b, h, i, j)] || ref.row_empty(b, h, i)) {
              EXPECT_EQ(x, 0.0) << "b=" << b << " h=" << h << " i=" << i << " j=" << j;
            }
          }
        }
      }
    }
    // The rest still matches the oracle.
    const double tol = dtype == DType::f64 ? 1e-12 : 2e-5;
    EXPECT_TRUE(all_close("out", f.out, ref.out, tol, tol));
    EXPECT_TRUE(all_close("lse", f.lse, ref.lse, tol, tol));
  }
}

INSTANTIATE_TEST_SUITE_P(Sources, EmptyRows,
                         ::testing::Values(EmptyBy::mask, EmptyBy::key_lengths,
                                           EmptyBy::bottom_right, EmptyBy::window, EmptyBy::no_keys,
                                           EmptyBy::minus_inf_bias),
                         [](const ::testing::TestParamInfo<EmptyBy>& info) {
                           return std::string(empty_by_name(info.param));
                         });

// ---------------------------------------------------------------------------------------------
// Dropout.

// The keep decision itself: over 2^20 positions, the drop rate is p to within 5 standard
// deviations of a binomial proportion (under 0.25% here, so well within 1% of p's scale).
TEST(Dropout, KeepRateOfThePhiloxDecision) {
  for (const double p : {0.1, 0.5, 0.9}) {
    std::int64_t dropped = 0, n = 0;
    for (std::uint32_t bh = 0; bh < 4; ++bh) {
      for (std::uint32_t i = 0; i < 256; ++i) {
        for (std::uint32_t j = 0; j < 1024; ++j, ++n) dropped += !dropout_keep(42, 7, bh, i, j, p);
      }
    }
    const double rate = static_cast<double>(dropped) / static_cast<double>(n);
    const double sigma = std::sqrt(p * (1 - p) / static_cast<double>(n));
    EXPECT_NEAR(rate, p, 5 * sigma) << "p=" << p;
    EXPECT_NEAR(rate, p, 0.01) << "p=" << p;
  }
}

// Through the API: with v one-hot along the keys (Dv = Tk), out_i = sum_j P_ij z_ij v_j exposes
// every P_ij z_ij, which must equal attention_weights times the Philox decision of (b * Hq + h,
// i, j) scaled by 1 / (1 - p); the share of dropped entries must be p.
TEST(Dropout, OutputIsWeightsTimesKeepOverOneMinusP) {
  const std::int64_t B = 2, Tq = 128, Tk = 128, Hq = 4, Hk = 2, D = 4;
  Generator g(21);
  const Tensor q = Tensor::randn({B, Tq, Hq, D}, g, DType::f64);
  const Tensor k = Tensor::randn({B, Tk, Hk, D}, g, DType::f64);
  Tensor v = Tensor::zeros({B, Tk, Hk, Tk}, DType::f64);
  for (std::int64_t b = 0; b < B; ++b) {
    for (std::int64_t j = 0; j < Tk; ++j) {
      for (std::int64_t h = 0; h < Hk; ++h) v.set({b, j, h, j}, 1.0);
    }
  }
  for (const double p : {0.1, 0.5, 0.9}) {
    AttentionOptions o = reference_options();
    o.dropout_p = p;
    o.seed = 0xDEADBEEFCAFEull;
    o.offset = 12;
    SCOPED_TRACE(describe(o));
    const std::vector<double> out = attention_forward(q, k, v, o).out.to_vector();
    const std::vector<double> w = attention_weights(q, k, o).to_vector();
    std::int64_t dropped = 0, mismatches = 0;
    for (std::int64_t b = 0; b < B; ++b) {
      for (std::int64_t h = 0; h < Hq; ++h) {
        for (std::int64_t i = 0; i < Tq; ++i) {
          for (std::int64_t j = 0; j < Tk; ++j) {
            const bool keep =
                dropout_keep(o.seed, o.offset, static_cast<std::uint32_t>(b * Hq + h),
                             static_cast<std::uint32_t>(i), static_cast<std::uint32_t>(j), p);
            const double pij = w[static_cast<std::size_t>(((b * Hq + h) * Tq + i) * Tk + j)];
            const double expected = keep ? pij / (1 - p) : 0.0;
            const double got = out[static_cast<std::size_t>(((b * Tq + i) * Hq + h) * Tk + j)];
            if (!(std::fabs(got - expected) <= 1e-14 * (1 + std::fabs(expected)))) ++mismatches;
            dropped += got == 0.0;
          }
        }
      }
    }
    EXPECT_EQ(mismatches, 0);
    const double n = static_cast<double>(B * Hq * Tq * Tk);
    const double rate = static_cast<double>(dropped) / n;
    EXPECT_NEAR(rate, p, 5 * std::sqrt(p * (1 - p) / n));
    EXPECT_NEAR(rate, p, 0.01);
  }
}

TEST(Dropout, SeedAndOffsetSelectTheMask) {
  Case c;
  c.B = 2, c.Tq = 6, c.Tk = 7, c.dropout = 0.4;
  const Problem p = make_problem(c, DType::f64);
  SCOPED_TRACE(p.describe());
  auto run = [&](std::uint64_t seed, std::uint64_t offset, double dropout_p) {
    AttentionOptions o = p.options;
    o.seed = seed;
    o.offset = offset;
    o.dropout_p = dropout_p;
    return attention_forward(p.q, p.k, p.v, o).out;
  };
  const Tensor base = run(1234, 0x500000007ull, 0.4);
  EXPECT_TRUE(bitwise_equal(run(1234, 0x500000007ull, 0.4), base));
  EXPECT_FALSE(bitwise_equal(run(1235, 0x500000007ull, 0.4), base)) << "seed";
  EXPECT_FALSE(bitwise_equal(run(1234 + (1ull << 32), 0x500000007ull, 0.4), base)) << "seed high";
  EXPECT_FALSE(bitwise_equal(run(1234, 0x500000008ull, 0.4), base)) << "offset low bits";
  EXPECT_FALSE(bitwise_equal(run(1234, 0x600000007ull, 0.4), base)) << "offset high bits";
  // Without dropout the seed is irrelevant.
  EXPECT_TRUE(bitwise_equal(run(1, 2, 0.0), run(3, 4, 0.0)));
}

// ---------------------------------------------------------------------------------------------
// Determinism: repeated calls give bitwise the same outputs and gradients.

TEST(Determinism, RepeatedCallsAreBitwiseEqual) {
  Case c;
  c.B = 2, c.Tq = 6, c.Tk = 9, c.Hq = 4, c.Hk = 2, c.D = 5, c.Dv = 3;
  c.causal = Causal::bottom_right, c.window = {4, 1}, c.padding = true, c.mask = Broadcast::tq_tk;
  c.bias = Broadcast::h_tk, c.alibi = true, c.softcap = 1.5, c.dropout = 0.3;
  for (const DType dtype : {DType::f64, DType::f32, DType::bf16}) {
    const Problem p = make_problem(c, dtype);
    SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + p.describe());
    const AttentionOutput f = attention_forward(p.q, p.k, p.v, p.options);
    const AttentionGrads g = attention_backward(p.dout, p.q, p.k, p.v, f.out, f.lse, p.options);
    const Tensor w = attention_weights(p.q, p.k, p.options);
    for (int repeat = 0; repeat < 3; ++repeat) {
      const AttentionOutput f2 = attention_forward(p.q, p.k, p.v, p.options);
      const AttentionGrads g2 =
          attention_backward(p.dout, p.q, p.k, p.v, f2.out, f2.lse, p.options);
      EXPECT_TRUE(bitwise_equal(f2.out, f.out));
      EXPECT_TRUE(bitwise_equal(f2.lse, f.lse));
      EXPECT_TRUE(bitwise_equal(g2.dq, g.dq));
      EXPECT_TRUE(bitwise_equal(g2.dk, g.dk));
      EXPECT_TRUE(bitwise_equal(g2.dv, g.dv));
      EXPECT_TRUE(bitwise_equal(g2.dbias, g.dbias));
      EXPECT_TRUE(bitwise_equal(attention_weights(p.q, p.k, p.options), w));
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Equivalences between options.

// GQA is MHA with each k/v head repeated for its group of query heads; dk and dv of a shared head
// are the sums over its group.
TEST(Equivalence, GroupedQueryEqualsRepeatedHeads) {
  for (const auto& [hq, hk] : {std::pair{4, 2}, std::pair{4, 1}, std::pair{6, 3}}) {
    Case c;
    c.B = 2, c.Tq = 5, c.Tk = 6, c.Hq = hq, c.Hk = hk, c.D = 3, c.Dv = 4;
    c.causal = Causal::bottom_right, c.alibi = true, c.dropout = 0.3, c.bias = Broadcast::h_tk;
    const Problem p = make_problem(c, DType::f64);
    SCOPED_TRACE(p.describe());
    const std::int64_t group = c.Hq / c.Hk;
    auto repeat = [&](const Tensor& t) {
      Tensor r = Tensor::zeros({c.B, c.Tk, c.Hq, t.size(3)}, DType::f64);
      for_each_index(r.shape(), [&](const Shape& i) {
        r.set(i, t.at({i[0], i[1], i[2] / group, i[3]}));
      });
      return r;
    };
    const Tensor k_rep = repeat(p.k), v_rep = repeat(p.v);
    const AttentionOutput f = attention_forward(p.q, p.k, p.v, p.options);
    const AttentionOutput fr = attention_forward(p.q, k_rep, v_rep, p.options);
    EXPECT_TRUE(bitwise_equal(f.out, fr.out));
    EXPECT_TRUE(bitwise_equal(f.lse, fr.lse));
    const AttentionGrads g = attention_backward(p.dout, p.q, p.k, p.v, f.out, f.lse, p.options);
    const AttentionGrads gr =
        attention_backward(p.dout, p.q, k_rep, v_rep, fr.out, fr.lse, p.options);
    EXPECT_TRUE(all_close("dq", g.dq, widen(gr.dq.to_vector()), 1e-14, 1e-14));
    for (const auto& [mine, theirs, name] :
         {std::tuple{&g.dk, &gr.dk, "dk"}, std::tuple{&g.dv, &gr.dv, "dv"}}) {
      Tensor summed = Tensor::zeros(mine->shape(), DType::f64);
      for_each_index(theirs->shape(), [&](const Shape& i) {
        const Shape to = {i[0], i[1], i[2] / group, i[3]};
        summed.set(to, summed.at(to) + theirs->at(i));
      });
      EXPECT_TRUE(all_close(name, *mine, widen(summed.to_vector()), 1e-13, 1e-14));
    }
  }
}

// A false mask entry and a -inf bias entry drop the same key.
TEST(Equivalence, MaskEqualsMinusInfinityBias) {
  Case c;
  c.B = 2, c.Tq = 5, c.Tk = 6, c.Hq = 2, c.Hk = 1, c.mask = Broadcast::full, c.softcap = 1.5;
  const Problem p = make_problem(c, DType::f64);
  SCOPED_TRACE(p.describe());
  AttentionOptions by_bias = p.options;
  by_bias.mask = Tensor();
  by_bias.bias = Tensor::zeros(p.options.mask.shape(), DType::f64);
  for_each_index(p.options.mask.shape(), [&](const Shape& i) {
    if (p.options.mask.at(i) == 0.0) by_bias.bias.set(i, -kInf);
  });
  const AttentionOutput f = attention_forward(p.q, p.k, p.v, p.options);
  const AttentionOutput fb = attention_forward(p.q, p.k, p.v, by_bias);
  EXPECT_TRUE(all_close("out", fb.out, widen(f.out.to_vector()), 1e-14, 1e-14));
  EXPECT_TRUE(all_close("lse", fb.lse, widen(f.lse.to_vector()), 1e-14, 1e-14));
  const AttentionGrads g = attention_backward(p.dout, p.q, p.k, p.v, f.out, f.lse, p.options);
  const AttentionGrads gb = attention_backward(p.dout, p.q, p.k, p.v, fb.out, fb.lse, by_bias);
  EXPECT_TRUE(all_close("dq", gb.dq, widen(g.dq.to_vector()), 1e-14, 1e-14));
  EXPECT_TRUE(all_close("dk", gb.dk, widen(g.dk.to_vector()), 1e-14, 1e-14));
  EXPECT_TRUE(all_close("dv", gb.dv, widen(g.dv.to_vector()), 1e-14, 1e-14));
  EXPECT_TRUE(all_finite(gb.dbias));
}

// A 0-dimensional bias broadcasts one constant c to every score: softmax does not see it, lse
// moves by exactly c's worth, and dbias, the sum of every dS (each row of dS sums to 0), vanishes.
// A 0-dimensional false mask drops every key.
TEST(Equivalence, ScalarBiasShiftsOnlyLseAndScalarMaskDropsAll) {
  Case c;
  c.B = 2, c.Tq = 4, c.Tk = 5, c.Hq = 2, c.Hk = 1, c.causal = Causal::bottom_right, c.alibi = true;
  const Problem p = make_problem(c, DType::f64);
  AttentionOptions shifted = p.options;
  shifted.bias = Tensor::from_values({}, {2.5}, DType::f64);
  SCOPED_TRACE(describe(shifted));
  const AttentionOutput f = attention_forward(p.q, p.k, p.v, p.options);
  const AttentionOutput fs = attention_forward(p.q, p.k, p.v, shifted);
  EXPECT_TRUE(all_close("out", fs.out, widen(f.out.to_vector()), 1e-14, 1e-14));
  std::vector<long double> lse_plus_c;
  for (const double x : f.lse.to_vector()) lse_plus_c.push_back(static_cast<long double>(x) + 2.5L);
  EXPECT_TRUE(all_close("lse", fs.lse, lse_plus_c, 1e-14, 1e-14));
  const AttentionGrads g = attention_backward(p.dout, p.q, p.k, p.v, fs.out, fs.lse, shifted);
  ASSERT_EQ(g.dbias.dim(), 0);
  EXPECT_NEAR(g.dbias.at(Shape{}), 0.0, 1e-13);

  AttentionOptions none_kept = p.options;
  none_kept.mask = Tensor::from_values({}, {0.0}, DType::boolean);
  const AttentionOutput fn = attention_forward(p.q, p.k, p.v, none_kept);
  EXPECT_EQ(fn.out.to_vector(), std::vector<double>(static_cast<std::size_t>(fn.out.numel()), 0.0));
  EXPECT_EQ(fn.lse.to_vector(),
            std::vector<double>(static_cast<std::size_t>(fn.lse.numel()), -kInf));
}

// With Tq == Tk both causal alignments are one mask; window {-1, 0} is bottom-right causal, and
// window {0, -1} is its mirror image (anti-causal) — checked against an explicit boolean mask.
TEST(Equivalence, CausalAlignmentsAndWindows) {
  for (const auto& [tq, tk] : {std::pair{5, 5}, std::pair{3, 7}, std::pair{7, 3}}) {
    Case c;
    c.B = 1, c.Tq = tq, c.Tk = tk, c.Hq = 2, c.Hk = 1, c.seed = 7;
    const Problem p = make_problem(c, DType::f64);
    SCOPED_TRACE(p.describe());
    auto run = [&](Causal causal, Window w, bool upper) {
      AttentionOptions o = p.options;
      o.causal = causal;
      o.window = w;
      if (upper) {
        o.mask = Tensor::zeros({c.Tq, c.Tk}, DType::boolean);
        for (std::int64_t i = 0; i < c.Tq; ++i) {
          for (std::int64_t j = 0; j < c.Tk; ++j) o.mask.set({i, j}, j >= i + tk - tq ? 1 : 0);
        }
      }
      return attention_forward(p.q, p.k, p.v, o).out;
    };
    const Tensor br = run(Causal::bottom_right, {}, false);
    EXPECT_TRUE(bitwise_equal(run(Causal::none, {-1, 0}, false), br));
    EXPECT_EQ(bitwise_equal(run(Causal::top_left, {}, false), br), tq == tk);
    EXPECT_TRUE(bitwise_equal(run(Causal::none, {0, -1}, false), run(Causal::none, {}, true)));
  }
}

}  // namespace
}  // namespace qkv::testing
