// Non-finite inputs (docs/numerics.md): a NaN or inf reaches exactly the outputs and gradients of
// the rows that read it, on both backends alike, and what lies outside a row's mask or past the
// lengths never reaches it. Each case poisons one element of q, k, v, bias or dout, predicts from
// the README's mask rules (written again here) which rows read it, and checks (1) the fused kernel
// and the reference agree element by element on which entries are NaN, +inf, -inf or finite, and
// on the finite values; (2) the rows that read the poison are non-finite where the rule says, and
// every other row is finite. Shapes: the tiled path with partial tiles (causal, window), the
// split-keys decode path (Tq <= 16, several key chunks), and 128-row q-blocks; the first two on
// every SIMD target.
#include <gtest/gtest.h>
#include <hwy/targets.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "kernels/cpu/fused_case.hpp"

namespace qkv::testing {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

struct Results {
  Tensor out, lse, dq, dk, dv, dbias;
};

Results run(const FusedInputs& in, Backend backend) {
  AttentionOptions options = in.options;
  options.backend = backend;
  const AttentionOutput f = attention_forward(in.q, in.k, in.v, options);
  const AttentionGrads g = attention_backward(in.dout, in.q, in.k, in.v, f.out, f.lse, options);
  return {f.out, f.lse, g.dq, g.dk, g.dv, g.dbias};
}

// NaN, +inf, -inf or finite.
int kind(double x) {
  if (std::isnan(x)) return 0;
  if (x == kInf) return 1;
  if (x == -kInf) return 2;
  return 3;
}

// The same class everywhere, and finite values equal to rounding.
void expect_same(const Tensor& fused, const Tensor& ref, const char* name, double tolerance) {
  if (!ref.defined()) return;
  const std::vector<double> f = fused.to_vector();
  const std::vector<double> r = ref.to_vector();
  double scale = 1;
  for (const double x : r) {
    if (std::isfinite(x)) scale = std::max(scale, std::fabs(x));
  }
  int reported = 0;
  for (std::size_t n = 0; n < f.size() && reported < 5; ++n) {
    const bool same_kind = kind(f[n]) == kind(r[n]);
    const bool close =
        kind(r[n]) != 3 || tolerance == kInf || std::fabs(f[n] - r[n]) <= tolerance * scale;
    if (!same_kind || !close) {
      ADD_FAILURE() << name << "[" << n << "]: fused " << f[n] << ", reference " << r[n];
      ++reported;
    }
  }
}

// Which keys row i of head h in batch b keeps, from the README's rules (step 3).
bool kept(const FusedInputs& in, std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) {
  const AttentionOptions& o = in.options;
  const std::int64_t Tq = in.q.size(1);
  const std::int64_t Tk = in.k.size(1);
  const std::int64_t tq = o.query_lengths.empty() ? Tq : o.query_lengths[b];
  const std::int64_t tk = o.key_lengths.empty() ? Tk : o.key_lengths[b];
  if (i >= tq || j >= tk) return false;
  const std::int64_t diagonal = i + tk - tq;
  if (o.causal == Causal::top_left && j > i) return false;
  if (o.causal == Causal::bottom_right && j > diagonal) return false;
  if (o.window.left >= 0 && j < diagonal - o.window.left) return false;
  if (o.window.right >= 0 && j > diagonal + o.window.right) return false;
  if (o.mask.defined() && o.mask.at({b, o.mask.size(1) == 1 ? 0 : h, i, j}) == 0) return false;
  return true;
}

struct Row {
  std::int64_t b, h, i;
};

bool row_keeps_any(const FusedInputs& in, const Row& r) {
  for (std::int64_t j = 0; j < in.k.size(1); ++j) {
    if (kept(in, r.b, r.h, r.i, j)) return true;
  }
  return false;
}

// Checks of one [B, T, H, C] output row.
bool all_finite(const Tensor& t, std::int64_t b, std::int64_t i, std::int64_t h) {
  for (std::int64_t c = 0; c < t.size(3); ++c) {
    if (!std::isfinite(t.at({b, i, h, c}))) return false;
  }
  return true;
}
bool all_nan(const Tensor& t, std::int64_t b, std::int64_t i, std::int64_t h) {
  for (std::int64_t c = 0; c < t.size(3); ++c) {
    if (!std::isnan(t.at({b, i, h, c}))) return false;
  }
  return true;
}

// A shape, and the SIMD target to run the fused kernel on (0: the best this CPU has).
struct Shape {
  std::string name;
  FusedCase c;
  std::int64_t target = 0;
};

void PrintTo(const Shape& s, std::ostream* os) { *os << s.name << " " << s.c.name(); }

class NonFinite : public ::testing::TestWithParam<Shape> {
 protected:
  void SetUp() override {
    if (GetParam().target != 0) hwy::SetSupportedTargetsForTest(GetParam().target);
  }
  void TearDown() override { hwy::SetSupportedTargetsForTest(0); }

  // Random inputs of the shape in dtype; f64 inputs are checked to 1e-10, f32 to 1e-4 (values are
  // not the point here: FusedVsReference holds them to the f32 rule).
  FusedInputs inputs(DType dtype) const { return make_inputs(GetParam().c, dtype); }
  static double tolerance(const FusedInputs& in) {
    return in.q.dtype() == DType::f64 ? 1e-10 : 1e-4;
  }

  // Both backends on `in`; the fused results must agree with the reference's in every class, and
  // in value unless the problem is too ill-conditioned for that (huge scores: the gradients are
  // rounding noise times the huge q).
  static Results compare(const FusedInputs& in, bool values = true) {
    const Results ref = run(in, Backend::reference);
    const Results fused = run(in, Backend::cpu);
    const double tol = values ? tolerance(in) : kInf;
    expect_same(fused.out, ref.out, "out", tol);
    expect_same(fused.lse, ref.lse, "lse", tol);
    expect_same(fused.dq, ref.dq, "dq", tol);
    expect_same(fused.dk, ref.dk, "dk", tol);
    expect_same(fused.dv, ref.dv, "dv", tol);
    expect_same(fused.dbias, ref.dbias, "dbias", tol);
    return fused;
  }

  // Every forward row: reading rows (poisoned(row)) match `poisoned_row`, others are finite
  // (or fully masked: out 0, lse -inf).
  template <class Poisoned, class Check>
  static void expect_forward_rows(const FusedInputs& in, const Results& r, Poisoned poisoned,
                                  Check poisoned_row) {
    const std::int64_t B = in.q.size(0), Tq = in.q.size(1), Hq = in.q.size(2);
    for (std::int64_t b = 0; b < B; ++b) {
      for (std::int64_t h = 0; h < Hq; ++h) {
        for (std::int64_t i = 0; i < Tq; ++i) {
          const Row row{b, h, i};
          SCOPED_TRACE("row b " + std::to_string(b) + " h " + std::to_string(h) + " i " +
                       std::to_string(i));
          if (poisoned(row)) {
            poisoned_row(row);
          } else {
            EXPECT_TRUE(all_finite(r.out, b, i, h));
            const double lse = r.lse.at({b, h, i});
            EXPECT_TRUE(std::isfinite(lse) || (lse == -kInf && !row_keeps_any(in, row)));
          }
        }
      }
    }
  }
};

std::int64_t group(const FusedInputs& in) { return in.q.size(2) / in.k.size(2); }

// Keys no poisoned row keeps have finite dk and dv; rows that are not poisoned have finite dq.
template <class Poisoned>
void expect_clean_gradients(const FusedInputs& in, const Results& r, Poisoned poisoned) {
  const std::int64_t B = in.q.size(0), Tq = in.q.size(1), Hq = in.q.size(2), Tk = in.k.size(1);
  std::vector<char> key_touched(static_cast<std::size_t>(B * Tk * in.k.size(2)), 0);
  for (std::int64_t b = 0; b < B; ++b) {
    for (std::int64_t h = 0; h < Hq; ++h) {
      for (std::int64_t i = 0; i < Tq; ++i) {
        const bool p = poisoned(Row{b, h, i});
        if (!p) {
          EXPECT_TRUE(all_finite(r.dq, b, i, h)) << "dq b " << b << " h " << h << " i " << i;
        }
        for (std::int64_t j = 0; j < Tk && p; ++j) {
          if (kept(in, b, h, i, j)) key_touched[(b * Tk + j) * in.k.size(2) + h / group(in)] = 1;
        }
      }
    }
  }
  for (std::int64_t b = 0; b < B; ++b) {
    for (std::int64_t j = 0; j < Tk; ++j) {
      for (std::int64_t hk = 0; hk < in.k.size(2); ++hk) {
        if (key_touched[(b * Tk + j) * in.k.size(2) + hk]) continue;
        EXPECT_TRUE(all_finite(r.dk, b, j, hk)) << "dk b " << b << " j " << j << " hk " << hk;
        EXPECT_TRUE(all_finite(r.dv, b, j, hk)) << "dv b " << b << " j " << j << " hk " << hk;
      }
    }
  }
}

// A key the mask keeps for some rows of its group and not for others: the middle key, or the
// last one a short key length still keeps.
std::int64_t poisoned_key(const FusedInputs& in) {
  const std::int64_t tk = in.options.key_lengths.empty() ? in.k.size(1) : in.options.key_lengths[0];
  return std::min<std::int64_t>(in.k.size(1) / 2, tk - 1);
}

TEST_P(NonFinite, NanInOneKeyReachesExactlyTheRowsThatKeepIt) {
  for (const DType dtype : {DType::f64, DType::f32}) {
    for (const double value : {kNaN, kInf}) {
      FusedInputs in = inputs(dtype);
      const std::int64_t j = poisoned_key(in);
      in.k = in.k.clone();
      in.k.set({0, j, 0, 1}, value);
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " k[0, " + std::to_string(j) +
                   ", 0, 1] = " + std::to_string(value));
      const Results r = compare(in);
      const auto poisoned = [&](const Row& row) {
        return row.b == 0 && row.h / group(in) == 0 && kept(in, row.b, row.h, row.i, j);
      };
      if (std::isnan(value)) {
        expect_forward_rows(in, r, poisoned, [&](const Row& row) {
          EXPECT_TRUE(all_nan(r.out, row.b, row.i, row.h));
          EXPECT_TRUE(std::isnan(r.lse.at({row.b, row.h, row.i})));
        });
      }
      expect_clean_gradients(in, r, poisoned);
    }
  }
}

TEST_P(NonFinite, NanInOneValueReachesOnlyItsColumnOfTheRowsThatKeepIt) {
  for (const DType dtype : {DType::f64, DType::f32}) {
    FusedInputs in = inputs(dtype);
    const std::int64_t j = poisoned_key(in);
    in.v = in.v.clone();
    in.v.set({0, j, 0, 2}, kNaN);
    SCOPED_TRACE(std::string(dtype_name(dtype)) + " v[0, " + std::to_string(j) + ", 0, 2] = NaN");
    const Results r = compare(in);
    const auto poisoned = [&](const Row& row) {
      return row.b == 0 && row.h / group(in) == 0 && kept(in, row.b, row.h, row.i, j);
    };
    expect_forward_rows(in, r, poisoned, [&](const Row& row) {
      for (std::int64_t c = 0; c < r.out.size(3); ++c) {
        EXPECT_EQ(std::isnan(r.out.at({row.b, row.i, row.h, c})), c == 2) << "column " << c;
      }
      EXPECT_TRUE(std::isfinite(r.lse.at({row.b, row.h, row.i})));
    });
    expect_clean_gradients(in, r, poisoned);
  }
}

// The example: with a causal mask a NaN in v[20] must leave rows 0-19 alone; and values
// past key_lengths, a KV cache's unused tail, may hold anything.
TEST_P(NonFinite, MaskedAndPastTheLengthsValuesAreNeverRead) {
  for (const DType dtype : {DType::f64, DType::f32}) {
    FusedInputs in = inputs(dtype);
    in.k = in.k.clone();
    in.v = in.v.clone();
    const std::int64_t Tk = in.k.size(1), Hk = in.k.size(2);
    // Past the lengths of batch 1 (its last 5 keys are dropped by the case's padding), NaN and
    // inf everywhere.
    const std::int64_t tk1 = in.options.key_lengths.at(1);
    ASSERT_LT(tk1, Tk);
    for (std::int64_t j = tk1; j < Tk; ++j) {
      for (std::int64_t hk = 0; hk < Hk; ++hk) {
        for (std::int64_t c = 0; c < in.k.size(3); ++c) in.k.set({1, j, hk, c}, kNaN);
        for (std::int64_t c = 0; c < in.v.size(3); ++c) {
          in.v.set({1, j, hk, c}, c % 2 ? kInf : kNaN);
        }
      }
    }
    // In batch 0, a key only some rows keep.
    const std::int64_t j0 = poisoned_key(in);
    const std::int64_t hk0 = Hk - 1;
    for (std::int64_t c = 0; c < in.v.size(3); ++c) in.v.set({0, j0, hk0, c}, kNaN);
    SCOPED_TRACE(dtype_name(dtype));
    const Results r = compare(in);
    const auto poisoned = [&](const Row& row) {
      return row.b == 0 && row.h / group(in) == hk0 && kept(in, row.b, row.h, row.i, j0);
    };
    expect_forward_rows(in, r, poisoned,
                        [&](const Row& row) { EXPECT_TRUE(all_nan(r.out, row.b, row.i, row.h)); });
    expect_clean_gradients(in, r, poisoned);
  }
}

TEST_P(NonFinite, NanOrInfInAQueryRowReachesOnlyThatRow) {
  for (const DType dtype : {DType::f64, DType::f32}) {
    for (const double value : {kNaN, kInf}) {
      FusedInputs in = inputs(dtype);
      const Row target{1, std::min<std::int64_t>(in.q.size(2) - 1, 2),
                       std::min<std::int64_t>(in.q.size(1) - 1, 5)};
      in.q = in.q.clone();
      in.q.set({target.b, target.i, target.h, 0}, value);
      // A positive k[.., 0] for every key makes each kept score +inf with an inf query: the row
      // is NaN (exp(inf - inf)), as PyTorch gives it.
      in.k = in.k.clone();
      for (std::int64_t j = 0; j < in.k.size(1); ++j) {
        const std::int64_t hk = target.h / group(in);
        in.k.set({target.b, j, hk, 0}, 0.5 + std::fabs(in.k.at({target.b, j, hk, 0})));
      }
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " q = " + std::to_string(value));
      const Results r = compare(in);
      const auto poisoned = [&](const Row& row) {
        return row.b == target.b && row.h == target.h && row.i == target.i &&
               row_keeps_any(in, row);
      };
      expect_forward_rows(in, r, poisoned, [&](const Row& row) {
        EXPECT_TRUE(all_nan(r.out, row.b, row.i, row.h));
        EXPECT_TRUE(std::isnan(r.lse.at({row.b, row.h, row.i})));
      });
      expect_clean_gradients(in, r, poisoned);
    }
  }
}

// Rows past query_lengths are not computed: their out is 0, lse -inf, and their q and dout,
// whatever they hold, reach no gradient.
TEST_P(NonFinite, RowsPastTheQueryLengthReadNothing) {
  for (const DType dtype : {DType::f64, DType::f32}) {
    FusedInputs in = inputs(dtype);
    const std::int64_t tq1 = in.options.query_lengths.at(1);
    ASSERT_LT(tq1, in.q.size(1));
    in.q = in.q.clone();
    in.dout = in.dout.clone();
    for (std::int64_t i = tq1; i < in.q.size(1); ++i) {
      for (std::int64_t h = 0; h < in.q.size(2); ++h) {
        for (std::int64_t c = 0; c < in.q.size(3); ++c) in.q.set({1, i, h, c}, kNaN);
        for (std::int64_t c = 0; c < in.dout.size(3); ++c) in.dout.set({1, i, h, c}, kInf);
      }
    }
    SCOPED_TRACE(dtype_name(dtype));
    const Results r = compare(in);
    expect_forward_rows(
        in, r, [](const Row&) { return false; }, [](const Row&) {});
    expect_clean_gradients(in, r, [](const Row&) { return false; });
    for (std::int64_t i = tq1; i < in.q.size(1); ++i) {
      EXPECT_EQ(r.lse.at({1, 0, i}), -kInf);
      EXPECT_EQ(r.out.at({1, i, 0, 0}), 0.0);
      EXPECT_EQ(r.dq.at({1, i, 0, 0}), 0.0);
    }
  }
}

// A NaN in dout row i reaches dq_i, and dk_j and dv_j of the keys row i keeps (dv only in its
// column), nothing else.
TEST_P(NonFinite, NanInDoutReachesTheGradientsOfThatRow) {
  for (const DType dtype : {DType::f64, DType::f32}) {
    FusedInputs in = inputs(dtype);
    const Row target{0, in.q.size(2) - 1, in.q.size(1) - 1};
    in.dout = in.dout.clone();
    in.dout.set({target.b, target.i, target.h, 1}, kNaN);
    SCOPED_TRACE(dtype_name(dtype));
    const Results r = compare(in);
    const auto poisoned = [&](const Row& row) {
      return row.b == target.b && row.h == target.h && row.i == target.i;
    };
    expect_clean_gradients(in, r, poisoned);
    if (row_keeps_any(in, target)) {
      EXPECT_TRUE(all_nan(r.dq, target.b, target.i, target.h));
    }
    for (std::int64_t j = 0; j < in.k.size(1); ++j) {
      if (!kept(in, target.b, target.h, target.i, j)) continue;
      const std::int64_t hk = target.h / group(in);
      EXPECT_TRUE(all_nan(r.dk, target.b, j, hk)) << "dk j " << j;
      for (std::int64_t c = 0; c < in.v.size(3); ++c) {
        EXPECT_EQ(std::isnan(r.dv.at({target.b, j, hk, c})), c == 1) << "dv j " << j << " c " << c;
      }
    }
  }
}

// A bias entry is read only where the mask keeps it. A row whose kept scores are all -inf (a bias
// used as a mask) is fully masked: out 0, lse -inf and zero gradients, even with NaN in its dout.
TEST_P(NonFinite, BiasNanWhereKeptAndMinusInfinityRows) {
  for (const DType dtype : {DType::f64, DType::f32}) {
    FusedInputs in = inputs(dtype);
    const std::int64_t Tq = in.q.size(1), Tk = in.k.size(1);
    in.options.bias = Tensor::zeros({in.q.size(2), Tq, Tk}, dtype);  // [Hq, Tq, Tk]
    in.dout = in.dout.clone();
    const Row nan_row{0, 0, Tq - 1};
    const Row dead_row{0, in.q.size(2) - 1, Tq / 2};
    std::int64_t nan_key = -1;
    for (std::int64_t j = 0; j < Tk; ++j) {
      // NaN at every position the mask drops in every batch, and at one key batch 0 keeps.
      bool kept_somewhere = false;
      for (std::int64_t b = 0; b < in.q.size(0); ++b) {
        kept_somewhere = kept_somewhere || kept(in, b, nan_row.h, nan_row.i, j);
      }
      if (!kept_somewhere) {
        in.options.bias.set({nan_row.h, nan_row.i, j}, kNaN);
      } else if (nan_key < 0 && kept(in, 0, nan_row.h, nan_row.i, j)) {
        nan_key = j;
        in.options.bias.set({nan_row.h, nan_row.i, j}, kNaN);
      }
      in.options.bias.set({dead_row.h, dead_row.i, j}, -kInf);
    }
    for (std::int64_t c = 0; c < in.dout.size(3); ++c) {
      in.dout.set({dead_row.b, dead_row.i, dead_row.h, c}, kNaN);
    }
    SCOPED_TRACE(std::string(dtype_name(dtype)) + " NaN bias at key " + std::to_string(nan_key));
    const Results r = compare(in);
    const auto is_dead = [&](const Row& row) { return row.h == dead_row.h && row.i == dead_row.i; };
    const auto poisoned = [&](const Row& row) {
      return is_dead(row) || (row.h == nan_row.h && row.i == nan_row.i && nan_key >= 0 &&
                              kept(in, row.b, row.h, row.i, nan_key));
    };
    expect_forward_rows(in, r, poisoned, [&](const Row& row) {
      if (!is_dead(row)) {
        EXPECT_TRUE(all_nan(r.out, row.b, row.i, row.h));
        return;
      }
      EXPECT_EQ(r.lse.at({row.b, row.h, row.i}), -kInf);
      for (std::int64_t c = 0; c < in.v.size(3); ++c)
        EXPECT_EQ(r.out.at({row.b, row.i, row.h, c}), 0.0);
      for (std::int64_t c = 0; c < in.q.size(3); ++c)
        EXPECT_EQ(r.dq.at({row.b, row.i, row.h, c}), 0.0);
    });
  }
}

// The keep-mask tensor drops keys whose k and v are NaN: the rows that drop them stay finite.
TEST_P(NonFinite, KeepMaskHidesNanKeys) {
  for (const DType dtype : {DType::f64, DType::f32}) {
    FusedInputs in = inputs(dtype);
    const std::int64_t B = in.q.size(0), Tq = in.q.size(1), Tk = in.k.size(1);
    in.options.mask = Tensor::full({B, 1, Tq, Tk}, 1.0, DType::boolean);
    in.k = in.k.clone();
    in.v = in.v.clone();
    const std::int64_t j = poisoned_key(in);
    for (std::int64_t i = 0; i < Tq; i += 2) in.options.mask.set({0, 0, i, j}, 0.0);
    for (std::int64_t c = 0; c < in.k.size(3); ++c) in.k.set({0, j, 0, c}, kNaN);
    for (std::int64_t c = 0; c < in.v.size(3); ++c) in.v.set({0, j, 0, c}, kInf);
    SCOPED_TRACE(dtype_name(dtype));
    const Results r = compare(in);
    const auto poisoned = [&](const Row& row) {
      return row.b == 0 && row.h / group(in) == 0 && kept(in, row.b, row.h, row.i, j);
    };
    expect_forward_rows(in, r, poisoned,
                        [&](const Row& row) { EXPECT_TRUE(all_nan(r.out, row.b, row.i, row.h)); });
    expect_clean_gradients(in, r, poisoned);
  }
}

// An inf value read with a weight that underflows to 0, or dropped by dropout, still gives NaN
// (0 * inf), as PyTorch's P @ V does; both backends the same.
TEST_P(NonFinite, InfValuesUnderDropoutAndUnderflow) {
  for (const DType dtype : {DType::f64, DType::f32}) {
    FusedInputs in = inputs(dtype);
    in.options.dropout_p = 0.5;
    const std::int64_t j = poisoned_key(in);
    in.v = in.v.clone();
    in.k = in.k.clone();
    in.v.set({0, j, 0, 0}, kInf);
    in.v.set({0, j, 0, 1}, -kInf);
    // In the last k/v head, key j's score far from the others' for every row: its weight
    // underflows to 0 in the rows where the score is very negative.
    const std::int64_t last = in.k.size(2) - 1;
    for (std::int64_t c = 0; c < in.k.size(3); ++c) {
      in.k.set({0, j, last, c}, 1e4 * (c % 2 ? 1 : -1));
    }
    in.v.set({0, j, last, in.v.size(3) - 1}, kInf);
    SCOPED_TRACE(dtype_name(dtype));
    // Scores of +-1e4 are rounded to ~1e-3 in f32: only f64 is compared in value.
    const Results r = compare(in, /*values=*/dtype == DType::f64);
    const auto poisoned = [&](const Row& row) {
      const std::int64_t hk = row.h / group(in);
      return row.b == 0 && (hk == 0 || hk == last) && kept(in, row.b, row.h, row.i, j);
    };
    expect_clean_gradients(in, r, poisoned);
  }
}

// Scores that overflow (finite inputs, infinite products) and soft-capping of infinite scores
// (tanh saturates: the capped score is finite) agree between backends.
TEST_P(NonFinite, OverflowAndSoftcapOfInfiniteScores) {
  for (const DType dtype : {DType::f64, DType::f32}) {
    for (const double softcap : {0.0, 5.0}) {
      FusedInputs in = inputs(dtype);
      in.options.softcap = softcap;
      in.q = in.q.clone();
      const double huge = dtype == DType::f64 ? 1e200 : 1e30;
      for (std::int64_t c = 0; c < in.q.size(3); ++c) in.q.set({1, 0, 0, c}, huge);
      in.q.set({0, 1, in.q.size(2) - 1, 0}, kInf);
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " softcap " + std::to_string(softcap));
      compare(in, /*values=*/false);
    }
  }
}

// scale q_c underflowing to 0 against an infinite k_c: both backends form (scale q) . k, so the
// score is 0 x inf = NaN on both (the reference once formed scale (q . k) = scale x inf, which
// soft-capping turned into a finite +-c while the fused row was NaN; found by the fuzzer). f64,
// where scale 1e-160 times q_c = 1e-170 underflows; q [B, Tq, Hq, D], k [B, Tk, Hk, D].
TEST_P(NonFinite, ScaledQueryUnderflowAgainstAnInfiniteKey) {
  for (const double softcap : {0.0, 5.0}) {
    FusedInputs in = inputs(DType::f64);
    in.options.softcap = softcap;
    in.options.scale = 1e-160;
    in.q = in.q.clone();
    in.k = in.k.clone();
    in.q.set({0, 1, 0, 0}, 1e-170);
    in.k.set({0, poisoned_key(in), 0, 0}, kInf);
    SCOPED_TRACE("softcap " + std::to_string(softcap));
    const Results r = compare(in, /*values=*/false);
    if (softcap > 0 && kept(in, 0, 0, 1, poisoned_key(in))) {
      EXPECT_TRUE(std::isnan(r.lse.at({0, 0, 1}))) << "row 1 of head 0 reads 0 x inf";
    }
  }
}

// A subnormal cap (f64): s / c saturates every score at +-c, and ds'/ds = 1 - tanh^2 is 0, not
// the NaN of 0 x (1 / c) = 0 x inf (found by the fuzzer: the reference's dual numbers formed
// (d / c) (1 - t^2) c, the fused kernel's s (1 / c)). Gradients stay finite and equal.
TEST_P(NonFinite, SubnormalSoftcapSaturatesWithoutNaN) {
  FusedInputs in = inputs(DType::f64);
  in.options.softcap = 5e-309;
  const Results r = compare(in);
  for (const Tensor* t : {&r.out, &r.dq, &r.dk, &r.dv}) {
    for (const double x : t->to_vector()) ASSERT_TRUE(std::isfinite(x));
  }
}

std::vector<Shape> shapes() {
  FusedCase tiled;  // partial tiles on the causal diagonal and at the key lengths
  tiled.B = 2;
  tiled.Tq = 70;
  tiled.Tk = 100;
  tiled.Hq = 4;
  tiled.Hk = 2;
  tiled.D = 16;
  tiled.Dv = 8;
  tiled.causal = Causal::bottom_right;
  tiled.padding = true;
  FusedCase window = tiled;
  window.causal = Causal::none;
  window.window = {20, 3};
  FusedCase decode = tiled;  // split-keys: two chunks of 1024 keys
  decode.Tq = 3;
  decode.Tk = 1100;
  FusedCase large = tiled;  // q-blocks of 128 rows: K and V of a head over 1 MiB
  large.Tq = 130;
  large.Tk = 1100;
  large.D = large.Dv = 128;
  large.Hq = large.Hk = 1;
  large.causal = Causal::top_left;
  std::vector<Shape> all = {
      {"Tiled", tiled}, {"Window", window}, {"Decode", decode}, {"LargeKv", large}};
  // The tiled and decode paths on every other SIMD target this CPU runs (the asan preset compiles
  // fewer): NaN handling differs between instruction sets (x86's max returns its second operand
  // when one is NaN, EMU128's the number), and the kernels must not depend on it.
  const std::vector<std::int64_t> targets = hwy::SupportedAndGeneratedTargets();
  for (std::size_t t = 1; t < targets.size(); ++t) {
    const std::string target = hwy::TargetName(targets[t]);
    all.push_back({"Tiled" + target, tiled, targets[t]});
    all.push_back({"Decode" + target, decode, targets[t]});
  }
  return all;
}

INSTANTIATE_TEST_SUITE_P(Shapes, NonFinite, ::testing::ValuesIn(shapes()),
                         [](const ::testing::TestParamInfo<Shape>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace qkv::testing
