// Mask and score mods as values (qkv/mod_values.hpp) against the compile-time mods and the
// built-in options: every predefined mask and & / | compositions give the tile kinds, kept keys,
// rows of drops and flex_attention results (outputs and gradients, f32 and f64) of
// the compile-time and_masks / or_masks bitwise; per_shape leaves are made for the problem;
// ALiBi and soft-capping as ScoreMods against AttentionOptions' own and finite differences.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/cpu/expect_error.hpp"
#include "kernels/cpu/finite_differences.hpp"
#include "kernels/cpu/fused_case.hpp"

namespace qkv::testing {
namespace {

// A predefined mod as the compile-time template sees it and as a MaskMod value.
struct ModPair {
  std::string name;
  std::function<BlockMask(std::int64_t B, std::int64_t H)> compiled;
  MaskMod value;
  // The compile-time mod's row of drops (detail::drop_row, what the kernels call), f32 and f64.
  std::function<void(std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t, float,
                     float*)>
      drop32;
  std::function<void(std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t, double,
                     double*)>
      drop64;
  bool square_only = false;  // documents: one id per position, Tq = Tk
};

template <class M>
ModPair pair(std::string name, std::int64_t Tq, std::int64_t Tk, M mod, MaskMod value,
             bool square_only = false) {
  return {std::move(name),
          [mod, Tq, Tk](std::int64_t B, std::int64_t H) {
            return create_block_mask(mod, B, H, Tq, Tk);
          },
          std::move(value),
          [mod](std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j0, std::int64_t cols,
                float value,
                float* x) { detail::drop_row<M, float>(&mod, b, h, i, j0, cols, value, x); },
          [mod](std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j0, std::int64_t cols,
                double value,
                double* x) { detail::drop_row<M, double>(&mod, b, h, i, j0, cols, value, x); },
          square_only};
}
// The value made from the compile-time mod itself (the implicit conversions).
template <class M>
ModPair same(std::string name, std::int64_t Tq, std::int64_t Tk, M mod, bool square_only = false) {
  return pair(std::move(name), Tq, Tk, mod, MaskMod(mod), square_only);
}

std::vector<ModPair> pairs(std::int64_t Tq, std::int64_t Tk) {
  std::vector<std::int64_t> ids;  // three documents in batch 0, two in batch 1
  for (std::int64_t t = 0; t < Tq; ++t) ids.push_back(t < Tq / 5 ? 4 : t < Tq / 2 ? 9 : 2);
  for (std::int64_t t = 0; t < Tq; ++t) ids.push_back(t < 2 * Tq / 3 ? 0 : 1);
  std::vector<std::uint8_t> layout;
  const std::int64_t block = 40;
  const std::int64_t qbs = (Tq + block - 1) / block, kbs = (Tk + block - 1) / block;
  for (std::int64_t n = 0; n < qbs * kbs; ++n) layout.push_back((n * 7 + 3) % 4 != 0);
  const auto causal = masks::causal();
  const auto document = masks::document(ids, 2);
  const auto window = masks::sliding_window(8, 8);
  const auto global = masks::global_tokens({0, 5, 100});
  const auto lengths = masks::key_lengths({std::min<std::int64_t>(150, Tk), 37});
  const auto fixed = masks::fixed(32, 4);
  const auto strided = masks::strided(50);
  const auto prefix = masks::prefix_lm({30, 100});
  return {
      same("full", Tq, Tk, masks::Full{}),
      same("causal", Tq, Tk, causal),
      same("causal_lower_right", Tq, Tk, masks::causal_lower_right(Tq, Tk)),
      same("sliding_window", Tq, Tk, masks::sliding_window(20, 5)),
      same("sliding_window_lower_right", Tq, Tk, masks::sliding_window(-1, 3, Tk - Tq)),
      same("key_lengths", Tq, Tk, lengths),
      same("prefix_lm", Tq, Tk, prefix),
      same("document", Tq, Tk, document, true),
      same("global_tokens", Tq, Tk, global),
      same("longformer", Tq, Tk, masks::longformer(16, {0, 5, 100})),
      same("bigbird", Tq, Tk, masks::bigbird(32, 3, 1, 2, 7, Tq, Tk, 2)),
      same("strided13", Tq, Tk, masks::strided(13)),
      same("strided64", Tq, Tk, masks::strided(64)),
      same("fixed", Tq, Tk, fixed),
      same("block_layout", Tq, Tk, masks::from_block_layout(layout, qbs, kbs, block)),
      pair("causal & document", Tq, Tk, and_masks(causal, document), MaskMod(causal) & document,
           true),
      pair("window | strided", Tq, Tk, or_masks(window, strided), MaskMod(window) | strided),
      pair("fixed & causal", Tq, Tk, and_masks(fixed, causal), MaskMod(fixed) & causal),
      pair("causal & fixed", Tq, Tk, and_masks(causal, fixed), MaskMod(causal) & fixed),
      pair("fixed | strided", Tq, Tk, or_masks(fixed, strided), MaskMod(fixed) | strided),
      pair("(window | global) & key_lengths", Tq, Tk, and_masks(or_masks(window, global), lengths),
           (MaskMod(window) | global) & lengths),
      pair("key_lengths & window & prefix_lm", Tq, Tk, and_masks(lengths, window, prefix),
           MaskMod(lengths) & window & prefix),
      pair("(causal & document) | global", Tq, Tk, or_masks(and_masks(causal, document), global),
           (MaskMod(causal) & document) | global, true),
      pair("global & (fixed | window)", Tq, Tk, and_masks(global, or_masks(fixed, window)),
           MaskMod(global) & (MaskMod(fixed) | window)),
  };
}

using Shape2 = std::tuple<std::int64_t, std::int64_t>;
constexpr Shape2 kShapes[] = {{200, 200}, {130, 260}, {260, 130}, {1, 300}, {70, 9}};

std::string describe(const ModPair& m, std::int64_t Tq, std::int64_t Tk) {
  return m.name + " Tq " + std::to_string(Tq) + " Tk " + std::to_string(Tk);
}

TEST(MaskModValue, TileKindsAndKeptKeysEqualTheCompileTimeMods) {
  for (const auto& [Tq, Tk] : kShapes) {
    for (const ModPair& m : pairs(Tq, Tk)) {
      if (m.square_only && Tq != Tk) continue;
      SCOPED_TRACE(describe(m, Tq, Tk));
      const BlockMask want = m.compiled(2, 2);
      const BlockMask got = create_block_mask(m.value, 2, 2, Tq, Tk);
      ASSERT_EQ(got.q_blocks(), want.q_blocks());
      ASSERT_EQ(got.k_blocks(), want.k_blocks());
      EXPECT_TRUE(got.data().kinds == want.data().kinds);
      EXPECT_TRUE(got.data().kinds_t == want.data().kinds_t);
      for (const TileKind kind : {TileKind::empty, TileKind::partial, TileKind::full}) {
        EXPECT_EQ(got.count(kind), want.count(kind));
      }
      EXPECT_EQ(max_error(got.dense(), want.dense()), 0.0);
    }
  }
}

// Rows of drops past one chunk of 64 keys and at every offset, against the compile-time mod's.
TEST(MaskModValue, RowsOfDropsEqualTheCompileTimeMods) {
  const std::int64_t Tq = 200, Tk = 200;
  for (const ModPair& m : pairs(Tq, Tk)) {
    SCOPED_TRACE(m.name);
    for (std::int64_t b = 0; b < 2; ++b) {
      for (std::int64_t i = 0; i < Tq; i += 7) {
        for (const auto& [j0, cols] : {std::pair<std::int64_t, std::int64_t>{0, 200},
                                       {64, 64},
                                       {13, 150},
                                       {190, 10},
                                       {5, 1}}) {
          std::vector<float> want32(cols), got32(cols);
          std::vector<double> want64(cols), got64(cols);
          for (std::int64_t c = 0; c < cols; ++c) {
            want32[c] = got32[c] = static_cast<float>(c + 1);
            want64[c] = got64[c] = static_cast<double>(c + 1);
          }
          m.drop32(b, 1, i, j0, cols, -1.0f, want32.data());
          m.value.drop_row(b, 1, i, j0, cols, -1.0f, got32.data());
          m.drop64(b, 1, i, j0, cols, -1.0, want64.data());
          m.value.drop_row(b, 1, i, j0, cols, -1.0, got64.data());
          ASSERT_EQ(got32, want32) << "b " << b << " i " << i << " j0 " << j0 << " cols " << cols;
          ASSERT_EQ(got64, want64) << "b " << b << " i " << i << " j0 " << j0 << " cols " << cols;
        }
      }
    }
  }
}

struct Inputs {
  Tensor q, k, v, dout;
};

Inputs inputs(std::int64_t B, std::int64_t Tq, std::int64_t Tk, std::int64_t Hq, std::int64_t Hk,
              std::int64_t D, DType dtype, std::uint64_t seed) {
  Generator g(seed);
  return {Tensor::randn({B, Tq, Hq, D}, g, DType::f64).to(dtype),
          Tensor::randn({B, Tk, Hk, D}, g, DType::f64).to(dtype),
          Tensor::randn({B, Tk, Hk, D}, g, DType::f64).to(dtype),
          Tensor::randn({B, Tq, Hq, D}, g, DType::f64).to(dtype)};
}

// out, lse, dq, dk, dv as values.
using Results = std::vector<std::vector<double>>;

template <class... Mod>
Results run(const Inputs& in, const BlockMask& blocks, Backend backend, const Mod&... score_mod) {
  FlexOptions o;
  o.backend = backend;
  const AttentionOutput f = flex_attention(in.q, in.k, in.v, score_mod..., blocks, o);
  const AttentionGrads g =
      flex_attention_backward(in.dout, in.q, in.k, in.v, f.out, f.lse, score_mod..., blocks, o);
  return {f.out.to_vector(), f.lse.to_vector(), g.dq.to_vector(), g.dk.to_vector(),
          g.dv.to_vector()};
}

TEST(MaskModValue, FlexResultsEqualTheCompileTimeModsBitwise) {
  for (const auto& [Tq, Tk] : kShapes) {
    for (const ModPair& m : pairs(Tq, Tk)) {
      if (m.square_only && Tq != Tk) continue;
      SCOPED_TRACE(describe(m, Tq, Tk));
      const BlockMask want = m.compiled(2, 4);
      const BlockMask got = create_block_mask(m.value, 2, 4, Tq, Tk);
      // The reference evaluates the mask element by element: the kept keys above settle it.
      for (const DType dtype : {DType::f32, DType::f64}) {
        SCOPED_TRACE(dtype_name(dtype));
        const Inputs in = inputs(2, Tq, Tk, 4, 2, 16, dtype, 11);
        EXPECT_TRUE(bitwise_equal(run(in, got, Backend::cpu), run(in, want, Backend::cpu)));
      }
    }
  }
}

TEST(MaskModValue, PerShapeLeavesAreMadeForTheProblem) {
  const MaskMod lower_right = MaskMod::per_shape(
      [](std::int64_t Tq, std::int64_t Tk) { return masks::causal_lower_right(Tq, Tk); });
  const MaskMod bigbird = MaskMod::per_shape(
      [](std::int64_t Tq, std::int64_t Tk) { return masks::bigbird(32, 3, 1, 2, 7, Tq, Tk, 2); });
  // A per_shape leaf whose mod holds another, under an or.
  const MaskMod nested =
      MaskMod(masks::global_tokens({3})) |
      MaskMod::per_shape([lower_right](std::int64_t, std::int64_t) {
        return MaskMod(masks::document({0, 0, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2}) & lower_right);
      });
  for (const auto& [Tq, Tk] : kShapes) {
    SCOPED_TRACE("Tq " + std::to_string(Tq) + " Tk " + std::to_string(Tk));
    const auto same_kinds = [](const BlockMask& a, const BlockMask& b) {
      return a.data().kinds == b.data().kinds && max_error(a.dense(), b.dense()) == 0.0;
    };
    EXPECT_TRUE(same_kinds(create_block_mask(lower_right, 1, 1, Tq, Tk),
                           create_block_mask(masks::causal_lower_right(Tq, Tk), 1, 1, Tq, Tk)));
    EXPECT_TRUE(
        same_kinds(create_block_mask(bigbird, 1, 2, Tq, Tk),
                   create_block_mask(masks::bigbird(32, 3, 1, 2, 7, Tq, Tk, 2), 1, 2, Tq, Tk)));
    const auto ids = masks::document({0, 0, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2});
    EXPECT_TRUE(same_kinds(
        create_block_mask(nested, 1, 1, Tq, Tk),
        create_block_mask(
            or_masks(masks::global_tokens({3}), and_masks(ids, masks::causal_lower_right(Tq, Tk))),
            1, 1, Tq, Tk)));
  }
  // Unmade, the leaf cannot answer.
  EXPECT_THROW(lower_right(0, 0, 0, 0), Error);
  EXPECT_THROW((MaskMod(masks::causal()) & lower_right)(0, 0, 0, 0), Error);
  EXPECT_TRUE(lower_right.for_shape(3, 5)(0, 0, 0, 2));
  EXPECT_FALSE(lower_right.for_shape(3, 5)(0, 0, 0, 3));
  EXPECT_THROW(MaskMod::per_shape(nullptr), Error);
}

// ALiBi, the soft cap and the two in sequence as ScoreMods, with a causal MaskMod, against the
// built-in options with bottom-right causal: ALiBi alone bitwise, f32 and f64; everything within
// 1e-12 in f64, and in f32 within the fused suite's rule against the f64 built-in.
TEST(ScoreModValue, MatchesTheBuiltInOptions) {
  const std::int64_t Tq = 150, Tk = 170, H = 4;
  const std::vector<double> slopes = {0.5, 0.25, 0.125, 0.0625};
  const BlockMask causal = create_block_mask(MaskMod::per_shape([](std::int64_t q, std::int64_t k) {
                                               return masks::causal_lower_right(q, k);
                                             }),
                                             1, 1, Tq, Tk);
  struct Case {
    std::string name;
    ScoreMod mod;
    bool alibi;
    double softcap;
  };
  const Case cases[] = {
      {"alibi", scores::alibi(slopes), true, 0.0},
      {"softcap", scores::softcap(2.0), false, 2.0},
      {"softcap then alibi", scores::softcap(2.0).then(scores::alibi(slopes)), true, 2.0},
  };
  for (const Case& c : cases) {
    for (const Backend backend : {Backend::cpu, Backend::reference}) {
      SCOPED_TRACE(c.name + (backend == Backend::cpu ? " cpu" : " reference"));
      AttentionOptions o;
      o.causal = Causal::bottom_right;
      if (c.alibi) o.alibi_slopes = slopes;
      o.softcap = c.softcap;
      o.backend = backend;
      const auto builtin = [&](const Inputs& in) {
        const AttentionOutput f = attention_forward(in.q, in.k, in.v, o);
        const AttentionGrads g = attention_backward(in.dout, in.q, in.k, in.v, f.out, f.lse, o);
        return Results{f.out.to_vector(), f.lse.to_vector(), g.dq.to_vector(), g.dk.to_vector(),
                       g.dv.to_vector()};
      };
      const Inputs in64 = inputs(2, Tq, Tk, H, 2, 16, DType::f64, 3);
      const Results want = builtin(in64);
      const Results got = run(in64, causal, backend, c.mod);
      // ALiBi alone is the built-in arithmetic on the same path: outputs and gradients bitwise.
      // The cap differs: the built-in takes tanh in f64 lanes (soft_cap_row) and renormalizes
      // rows in the backward.
      if (c.softcap == 0) {
        EXPECT_TRUE(bitwise_equal(got, want));
      }
      for (std::size_t f = 0; f < want.size(); ++f) {
        double scale = 1, worst = 0;
        for (std::size_t n = 0; n < want[f].size(); ++n) {
          if (std::isfinite(want[f][n])) scale = std::max(scale, std::fabs(want[f][n]));
          if (want[f][n] != got[f][n]) worst = std::max(worst, std::fabs(want[f][n] - got[f][n]));
        }
        EXPECT_LE(worst, 1e-12 * scale) << "result " << f;
      }
      // f32: the flex error against the f64 built-in within 2x (3x for gradients) the error of
      // the built-in path run in f32, plus 1e-6 of the largest value.
      const Inputs in32 = inputs(2, Tq, Tk, H, 2, 16, DType::f32, 3);
      const Inputs wide{in32.q.to(DType::f64), in32.k.to(DType::f64), in32.v.to(DType::f64),
                        in32.dout.to(DType::f64)};
      const Results exact = builtin(wide), naive = builtin(in32);
      const Results got32 = run(in32, causal, backend, c.mod);
      if (c.softcap == 0) {
        EXPECT_TRUE(bitwise_equal(got32, naive));
      }
      for (std::size_t f = 0; f < exact.size(); ++f) {
        double err = 0, err_naive = 0, largest = 0;
        for (std::size_t n = 0; n < exact[f].size(); ++n) {
          if (!std::isfinite(exact[f][n])) continue;
          largest = std::max(largest, std::fabs(exact[f][n]));
          err = std::max(err, std::fabs(got32[f][n] - exact[f][n]));
          err_naive = std::max(err_naive, std::fabs(naive[f][n] - exact[f][n]));
        }
        EXPECT_LE(err, (f < 2 ? 2.0 : 3.0) * err_naive + 1e-6 * largest) << "result " << f;
      }
    }
  }
}

// The identity ScoreMod runs as no score mod at all.
TEST(ScoreModValue, IdentityIsNoScoreMod) {
  const Inputs in = inputs(1, 100, 120, 2, 2, 16, DType::f32, 6);
  const BlockMask blocks = create_block_mask(masks::sliding_window(30, 10), 1, 1, 100, 120);
  EXPECT_TRUE(
      bitwise_equal(run(in, blocks, Backend::cpu, ScoreMod()), run(in, blocks, Backend::cpu)));
  const ScoreMod cap = scores::softcap(3.0);
  EXPECT_TRUE(bitwise_equal(run(in, blocks, Backend::cpu, ScoreMod().then(cap).then(ScoreMod())),
                            run(in, blocks, Backend::cpu, cap)));
}

// ALiBi then a soft cap (the chain through both nodes' dual numbers) against central differences
// of L = sum(dout * out), in f64, on both backends.
TEST(ScoreModValue, GradientsMatchFiniteDifferences) {
  const std::int64_t Tq = 9, Tk = 11, Hq = 2;
  const Inputs in = inputs(1, Tq, Tk, Hq, 1, 4, DType::f64, 21);
  const ScoreMod mod = scores::alibi({0.3, 0.1}).then(scores::softcap(1.5));
  const BlockMask blocks = create_block_mask(
      MaskMod(masks::sliding_window(4, 2, Tk - Tq)) | masks::strided(3), 1, 1, Tq, Tk);
  for (const Backend backend : {Backend::cpu, Backend::reference}) {
    FlexOptions o;
    o.backend = backend;
    const AttentionOutput f = flex_attention(in.q, in.k, in.v, mod, blocks, o);
    const AttentionGrads g =
        flex_attention_backward(in.dout, in.q, in.k, in.v, f.out, f.lse, mod, blocks, o);
    expect_finite_differences(
        [&](const Tensor& q, const Tensor& k, const Tensor& v) {
          return flex_attention(q, k, v, mod, blocks, o).out;
        },
        in.dout, {in.q, in.k, in.v}, {g.dq, g.dk, g.dv}, 3, 1e-7);
  }
}

TEST(ScoreModValue, RefusesWhatDoesNotFit) {
  const Inputs in = inputs(1, 10, 12, 4, 2, 8, DType::f32, 1);
  const BlockMask none;
  expect_error(
      [&] {
        flex_attention(in.q, in.k, in.v, scores::alibi({1, 2, 3}), none);
      },
      "score_mod: alibi slopes: expected 4 slopes");
  expect_error(
      [&] {
        flex_attention(in.q, in.k, in.v, scores::alibi({1, 2, 3, 1e39}), none);
      },
      "f32's largest");
  expect_error([&] { flex_attention(in.q, in.k, in.v, scores::softcap(1e39), none); },
               "score_mod: softcap");
  expect_error([&] { flex_attention(in.q.slice(3, 0, 4), in.k, in.v, scores::softcap(2), none); },
               "head dim");
  expect_error([] { scores::softcap(0); }, "softcap: expected a finite cap > 0");
  expect_error([] { scores::alibi({0.5, std::nan("")}); }, "slopes[1]");
  expect_error([] { scores::alibi({}); }, "slopes");
  // f64 inputs take slopes past f32's largest.
  const Inputs in64 = inputs(1, 10, 12, 4, 2, 8, DType::f64, 1);
  EXPECT_NO_THROW(flex_attention(in64.q, in64.k, in64.v, scores::alibi({1, 2, 3, 1e39}), none));
}

}  // namespace
}  // namespace qkv::testing
