// flex_attention and block masks: every predefined mask mod's closed-form tile kinds against an
// element walk of the same mod; flex_attention (fused) against the reference given the mod's
// dense mask as a keep-mask tensor, forward and backward, in f64 to rounding and in f32 by the
// fused suite's rule; score mods against the built-in options and finite differences; the tiles
// the kernel skipped counted against the block mask; user lambdas against built-ins bitwise.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/cpu/expect_error.hpp"
#include "kernels/cpu/finite_differences.hpp"
#include "kernels/cpu/fused_case.hpp"

namespace qkv::testing {
namespace {

// A mask mod under test, erased to a block-mask factory for the given sizes.
struct MaskCase {
  std::string name;
  std::function<BlockMask(std::int64_t B, std::int64_t H, std::int64_t Tq, std::int64_t Tk)> make;
  // The same mod's kinds by the element walk, for tile (b, h, i0, i1, j0, j1).
  std::function<TileKind(std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                         std::int64_t)>
      walk;
  bool square_only = false;  // documents: one id per position, Tq = Tk
  // The mod itself, and masks::key_hull where the mod bounds its keys (masks::HasKeyHull).
  std::function<bool(std::int64_t, std::int64_t, std::int64_t, std::int64_t)> keep;
  std::function<KeyRange(std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t)>
      hull;
};

template <class M>
MaskCase mask_case(std::string name, M mod, bool square_only = false) {
  MaskCase c{
      std::move(name),
      [mod](std::int64_t B, std::int64_t H, std::int64_t Tq, std::int64_t Tk) {
        return create_block_mask(mod, B, H, Tq, Tk);
      },
      [mod](std::int64_t b, std::int64_t h, std::int64_t i0, std::int64_t i1, std::int64_t j0,
            std::int64_t j1) { return masks::tile_by_elements(mod, b, h, i0, i1, j0, j1); },
      square_only,
      [mod](std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) {
        return static_cast<bool>(mod(b, h, i, j));
      },
      nullptr};
  if constexpr (masks::HasKeyHull<M>) {
    c.hull = [mod](std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j0,
                   std::int64_t j1) { return masks::key_hull(mod, b, h, i, j0, j1); };
  }
  return c;
}

std::vector<MaskCase> mask_cases(std::int64_t Tq, std::int64_t Tk) {
  std::vector<std::int64_t> ids;  // three documents in batch 0, two in batch 1
  for (std::int64_t t = 0; t < Tq; ++t) ids.push_back(t < Tq / 5 ? 4 : t < Tq / 2 ? 9 : 2);
  for (std::int64_t t = 0; t < Tq; ++t) ids.push_back(t < 2 * Tq / 3 ? 0 : 1);
  std::vector<std::uint8_t> layout;
  const std::int64_t block = 40;
  const std::int64_t qbs = (Tq + block - 1) / block, kbs = (Tk + block - 1) / block;
  for (std::int64_t n = 0; n < qbs * kbs; ++n) layout.push_back((n * 7 + 3) % 4 != 0);
  auto lambda = [](std::int64_t, std::int64_t h, std::int64_t i, std::int64_t j) {
    return i % 7 != 3 && ((i + 2 * j + h) % 3 != 0 || j == 0);  // rows i % 7 == 3 keep nothing
  };
  return {
      mask_case("causal", masks::causal()),
      mask_case("causal_lower_right", masks::causal_lower_right(Tq, Tk)),
      mask_case("sliding_window", masks::sliding_window(20, 5)),
      mask_case("key_lengths", masks::key_lengths({std::min<std::int64_t>(150, Tk), 37})),
      mask_case("prefix_lm", masks::prefix_lm({30, 100})),
      mask_case("document", masks::document(ids, 2), true),
      mask_case("causal_document", and_masks(masks::causal(), masks::document(ids, 2)), true),
      mask_case("global_tokens", masks::global_tokens({0, 5, 100})),
      mask_case("longformer", masks::longformer(16, {0, 5, 100})),
      mask_case("bigbird", masks::bigbird(32, 3, 1, 2, 7, Tq, Tk, 2)),
      mask_case("strided13", masks::strided(13)),
      mask_case("strided64", masks::strided(64)),
      mask_case("fixed", masks::fixed(32, 4)),
      mask_case("block_layout", masks::from_block_layout(layout, qbs, kbs, block)),
      mask_case("window_or_strided", or_masks(masks::sliding_window(8, 8), masks::strided(50))),
      mask_case("lambda", lambda),
      mask_case("causal_and_lambda", and_masks(masks::causal(), lambda)),
      mask_case("lambda_and_window", and_masks(lambda, masks::sliding_window(10, 10))),
  };
}

using Shape2 = std::tuple<std::int64_t, std::int64_t>;
constexpr Shape2 kShapes[] = {{200, 200}, {130, 260}, {260, 130}, {1, 300}, {70, 9}};

TEST(BlockMask, ClosedFormsMatchTheElementWalk) {
  for (const auto& [Tq, Tk] : kShapes) {
    for (const MaskCase& m : mask_cases(Tq, Tk)) {
      if (m.square_only && Tq != Tk) continue;
      SCOPED_TRACE(m.name + " Tq " + std::to_string(Tq) + " Tk " + std::to_string(Tk));
      const BlockMask blocks = m.make(2, 2, Tq, Tk);
      std::int64_t counts[3] = {0, 0, 0};
      for (std::int64_t b = 0; b < blocks.batches(); ++b) {
        for (std::int64_t h = 0; h < blocks.heads(); ++h) {
          for (std::int64_t qb = 0; qb < blocks.q_blocks(); ++qb) {
            for (std::int64_t kb = 0; kb < blocks.k_blocks(); ++kb) {
              const std::int64_t i0 = qb * blocks.block_q(), j0 = kb * blocks.block_k();
              const TileKind want = m.walk(b, h, i0, std::min(i0 + blocks.block_q(), Tq), j0,
                                           std::min(j0 + blocks.block_k(), Tk));
              const TileKind got = blocks.kind(b, h, qb, kb);
              ++counts[static_cast<int>(got)];
              ASSERT_EQ(static_cast<int>(got), static_cast<int>(want))
                  << "b " << b << " h " << h << " qb " << qb << " kb " << kb;
            }
          }
        }
      }
      for (const TileKind kind : {TileKind::empty, TileKind::partial, TileKind::full}) {
        EXPECT_EQ(blocks.count(kind), counts[static_cast<int>(kind)]);
      }
    }
  }
}

// A key hull (what the fused forward narrows a partial tile's products to) holds every key the
// row keeps in the range asked about and lies within that range; the hulls of intervals, global
// tokens and their unions (Longformer) are exact: from the first kept key to the last.
TEST(BlockMask, KeyHullsHoldEveryKeptKey) {
  const std::set<std::string> exact = {
      "causal",     "causal_lower_right", "sliding_window",  "key_lengths",
      "prefix_lm",  "document",           "causal_document", "global_tokens",
      "longformer", "strided13",          "strided64",       "window_or_strided"};
  const std::set<std::string> with_hull = {"lambda_and_window", "causal_and_lambda"};
  for (const auto& [Tq, Tk] : kShapes) {
    for (const MaskCase& m : mask_cases(Tq, Tk)) {
      if (m.square_only && Tq != Tk) continue;
      EXPECT_EQ(m.hull != nullptr, exact.count(m.name) + with_hull.count(m.name) > 0) << m.name;
      if (!m.hull) continue;
      SCOPED_TRACE(m.name + " Tq " + std::to_string(Tq) + " Tk " + std::to_string(Tk));
      std::vector<KeyRange> ranges = {{0, Tk}};
      for (const std::int64_t width : {64, 37}) {
        for (std::int64_t j0 = 0; j0 < Tk; j0 += width) {
          ranges.push_back({j0, std::min(j0 + width, Tk)});  // as the kernel asks: within Tk
        }
      }
      for (std::int64_t b = 0; b < 2; ++b) {
        for (std::int64_t h = 0; h < 2; ++h) {
          for (std::int64_t i = 0; i < Tq; ++i) {
            for (const KeyRange range : ranges) {
              const KeyRange hull = m.hull(b, h, i, range.lo, range.hi);
              std::int64_t first = -1, last = -1;
              for (std::int64_t j = range.lo; j < range.hi; ++j) {
                if (!m.keep(b, h, i, j)) continue;
                if (first < 0) first = j;
                last = j;
              }
              const std::string at = "b " + std::to_string(b) + " h " + std::to_string(h) + " i " +
                                     std::to_string(i) + " keys [" + std::to_string(range.lo) +
                                     ", " + std::to_string(range.hi) + ")";
              if (first < 0) {
                if (exact.count(m.name)) {
                  EXPECT_TRUE(hull.empty()) << at;
                }
                continue;
              }
              ASSERT_TRUE(hull.lo >= range.lo && hull.hi <= range.hi) << at;
              ASSERT_TRUE(hull.lo <= first && last < hull.hi) << at;
              if (exact.count(m.name)) {
                ASSERT_EQ(hull.lo, first) << at;
                ASSERT_EQ(hull.hi, last + 1) << at;
              }
            }
          }
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

struct Results {
  Tensor out, lse, dq, dk, dv;
};

Results run_flex(const Inputs& in, const BlockMask& blocks, Backend backend) {
  FlexOptions o;
  o.backend = backend;
  const AttentionOutput f = flex_attention(in.q, in.k, in.v, blocks, o);
  const AttentionGrads g =
      flex_attention_backward(in.dout, in.q, in.k, in.v, f.out, f.lse, blocks, o);
  return {f.out, f.lse, g.dq, g.dk, g.dv};
}

// The built-in path with the block mask's dense mask as a keep-mask tensor.
Results run_dense(const Inputs& in, const BlockMask& blocks, Backend backend) {
  AttentionOptions o;
  o.backend = backend;
  o.mask = blocks.dense();
  const AttentionOutput f = attention_forward(in.q, in.k, in.v, o);
  const AttentionGrads g = attention_backward(in.dout, in.q, in.k, in.v, f.out, f.lse, o);
  return {f.out, f.lse, g.dq, g.dk, g.dv};
}

constexpr Tensor Results::*kFields[] = {&Results::out, &Results::lse, &Results::dq, &Results::dk,
                                        &Results::dv};
constexpr const char* kNames[] = {"out", "lse", "dq", "dk", "dv"};

TEST(FlexAttention, EveryPatternMatchesTheReferenceWithItsDenseMask) {
  for (const auto& [Tq, Tk] : kShapes) {
    for (const MaskCase& m : mask_cases(Tq, Tk)) {
      if (m.square_only && Tq != Tk) continue;
      SCOPED_TRACE(m.name + " Tq " + std::to_string(Tq) + " Tk " + std::to_string(Tk));
      const BlockMask blocks = m.make(2, 4, Tq, Tk);
      // f64: fused flex, the reference flex and the dense built-in reference agree to rounding.
      const Inputs in = inputs(2, Tq, Tk, 4, 2, 16, DType::f64, 11);
      const Results oracle = run_dense(in, blocks, Backend::reference);
      const Results fused = run_flex(in, blocks, Backend::cpu);
      const Results ref = run_flex(in, blocks, Backend::reference);
      for (int f = 0; f < 5; ++f) {
        SCOPED_TRACE(kNames[f]);
        const double tol = 1e-12 * std::max(1.0, max_abs(oracle.*kFields[f]));
        EXPECT_LE(max_error(fused.*kFields[f], oracle.*kFields[f]), tol);
        EXPECT_LE(max_error(ref.*kFields[f], oracle.*kFields[f]), tol);
      }
      // f32: the fused flex error against the f64 oracle within 2x (3x for gradients) the
      // error of the reference run in f32, plus 1e-6 of the largest value.
      const Inputs in32 = inputs(2, Tq, Tk, 4, 2, 16, DType::f32, 11);
      const Results fused32 = run_flex(in32, blocks, Backend::cpu);
      const Results ref32 = run_dense(in32, blocks, Backend::reference);
      const Inputs wide{in32.q.to(DType::f64), in32.k.to(DType::f64), in32.v.to(DType::f64),
                        in32.dout.to(DType::f64)};
      const Results exact = run_dense(wide, blocks, Backend::reference);
      // The floor is relative to the largest value of the outputs or of the gradients: where
      // the math cancels (one key kept: dS = 0) the reference is exact by symmetry.
      const double largest_grad =
          std::max({max_abs(exact.dq), max_abs(exact.dk), max_abs(exact.dv)});
      for (int f = 0; f < 5; ++f) {
        SCOPED_TRACE(kNames[f]);
        const double slack = (f < 2 ? 2.0 : 3.0) * max_error(ref32.*kFields[f], exact.*kFields[f]);
        const double floor = 1e-6 * (f < 2 ? max_abs(exact.*kFields[f]) : largest_grad);
        EXPECT_LE(max_error(fused32.*kFields[f], exact.*kFields[f]), slack + floor);
      }
    }
  }
}

// A user lambda with the rule of a built-in option takes the same path through the kernel (the
// block mask's full tiles skip the mask, partial ones drop the same keys): bitwise the same.
TEST(FlexAttention, LambdaEqualsTheBuiltInBitwise) {
  for (const auto& [Tq, Tk] : kShapes) {
    SCOPED_TRACE("Tq " + std::to_string(Tq) + " Tk " + std::to_string(Tk));
    const Inputs in = inputs(1, Tq, Tk, 4, 4, 32, DType::f32, 5);
    const std::int64_t offset = Tk - Tq;
    auto causal = [offset](std::int64_t, std::int64_t, std::int64_t i, std::int64_t j) {
      return j <= i + offset;
    };
    AttentionOptions o;
    o.causal = Causal::bottom_right;
    const AttentionOutput builtin = attention_forward(in.q, in.k, in.v, o);
    const AttentionGrads gb =
        attention_backward(in.dout, in.q, in.k, in.v, builtin.out, builtin.lse, o);
    const Results flex = run_flex(in, create_block_mask(causal, 1, 1, Tq, Tk), Backend::cpu);
    EXPECT_EQ(max_error(flex.out, builtin.out), 0.0);
    EXPECT_EQ(max_error(flex.lse, builtin.lse), 0.0);
    EXPECT_EQ(max_error(flex.dq, gb.dq), 0.0);
    EXPECT_EQ(max_error(flex.dk, gb.dk), 0.0);
    EXPECT_EQ(max_error(flex.dv, gb.dv), 0.0);
  }
}

// Lambdas the same for every head, over sparse patterns: the forward takes each q-block's heads
// one after another and reads the kept keys of its partial tiles from the first head's
// evaluation, and the backward from one evaluation of every partial tile before its items
// (kernels/cpu/drop_cache-inl.h). Bitwise the built-in with the same rule, for a
// window (block mask for one batch and head) and for documents that differ by batch (a block mask
// per batch), with GQA and lengths off the tiles, f32 and f64, on one thread and on several.
TEST(FlexAttention, LambdasSharedByTheHeadsEqualTheBuiltInBitwise) {
  const std::int64_t T = 700;
  std::vector<std::int64_t> ids;  // [2, T]: batch 0 in seven documents, batch 1 in five
  for (std::int64_t t = 0; t < T; ++t) ids.push_back(t / 100);
  for (std::int64_t t = 0; t < T; ++t)
    ids.push_back(t < 90 ? 5 : t < 300 ? 6 : t < 450 ? 7 : 8 + t / 560);
  auto window = [](std::int64_t, std::int64_t, std::int64_t i, std::int64_t j) {
    return i - j <= 100 && j - i <= 70;
  };
  auto documents = [ids, T](std::int64_t b, std::int64_t, std::int64_t i, std::int64_t j) {
    return ids[static_cast<std::size_t>(b * T + i)] == ids[static_cast<std::size_t>(b * T + j)];
  };
  const std::vector<std::tuple<std::string, BlockMask, BlockMask>> cases = {
      {"window", create_block_mask(window, 1, 1, T, T),
       create_block_mask(masks::sliding_window(100, 70), 1, 1, T, T)},
      {"documents", create_block_mask(documents, 2, 1, T, T),
       create_block_mask(masks::document(ids, 2), 2, 1, T, T)}};
  const int threads = num_threads();
  for (const auto& [name, lambda, builtin] : cases) {
    ASSERT_GT(2 * lambda.data().counts[static_cast<int>(TileKind::empty)],
              static_cast<std::int64_t>(lambda.data().kinds.size()))
        << name << ": the test is of a sparse pattern";
    for (const DType dtype : {DType::f32, DType::f64}) {
      for (const int n : {1, threads}) {
        SCOPED_TRACE(name + " " + std::string(dtype_name(dtype)) + ", " + std::to_string(n) +
                     " threads");
        set_num_threads(n);
        const Inputs in = inputs(2, T, T, 4, 2, 24, dtype, 17);
        const Results got = run_flex(in, lambda, Backend::cpu);
        const Results want = run_flex(in, builtin, Backend::cpu);
        EXPECT_EQ(max_error(got.out, want.out), 0.0);
        EXPECT_EQ(max_error(got.lse, want.lse), 0.0);
        EXPECT_EQ(max_error(got.dq, want.dq), 0.0);
        EXPECT_EQ(max_error(got.dk, want.dk), 0.0);
        EXPECT_EQ(max_error(got.dv, want.dv), 0.0);
      }
    }
  }
  set_num_threads(threads);
}

// A sparse forward walks its items head by head where a round of heads' tiles would not stay in
// L2, and a lambda's partial tiles always q-block by q-block (flash_fwd.cpp, heads_inside): with
// 32 heads of D 64 a window's round is megabytes, so the built-in window goes head by head and
// the lambda does not. The order of the items leaves every result's bits as they are.
TEST(FlexAttention, ItemOrdersOfASparseForwardGiveTheSameBits) {
  const std::int64_t T = 1000;
  auto window = [](std::int64_t, std::int64_t, std::int64_t i, std::int64_t j) {
    return i - j <= 150 && j - i <= 150;
  };
  const BlockMask lambda = create_block_mask(window, 1, 1, T, T);
  const BlockMask builtin = create_block_mask(masks::sliding_window(150, 150), 1, 1, T, T);
  const int threads = num_threads();
  for (const int n : {1, threads}) {
    SCOPED_TRACE(std::to_string(n) + " threads");
    set_num_threads(n);
    const Inputs in = inputs(1, T, T, 32, 32, 64, DType::f32, 23);
    FlexOptions o;
    o.backend = Backend::cpu;
    const AttentionOutput got = flex_attention(in.q, in.k, in.v, lambda, o);
    const AttentionOutput want = flex_attention(in.q, in.k, in.v, builtin, o);
    EXPECT_EQ(max_error(got.out, want.out), 0.0);
    EXPECT_EQ(max_error(got.lse, want.lse), 0.0);
  }
  set_num_threads(threads);
}

// Score mods: a generic lambda for ALiBi equals the built-in ALiBi option (f64); a soft cap as a
// lambda on qkv::tanh equals the built-in cap to rounding.
TEST(FlexAttention, ScoreModsMatchTheBuiltInOptions) {
  const std::int64_t Tq = 150, Tk = 170, H = 4;
  const Inputs in = inputs(2, Tq, Tk, H, 2, 16, DType::f64, 3);
  std::vector<double> slopes = {0.5, 0.25, 0.125, 0.0625};
  const std::int64_t offset = Tk - Tq;
  auto alibi = [slopes, offset](auto s, std::int64_t, std::int64_t h, std::int64_t i,
                                std::int64_t j) {
    const std::int64_t distance = i + offset - j;
    return s - slopes[h] * static_cast<double>(distance < 0 ? -distance : distance);
  };
  auto softcap = [](auto s, std::int64_t, std::int64_t, std::int64_t, std::int64_t) {
    return 2.0 * qkv::tanh(s / 2.0);
  };
  const BlockMask causal = create_block_mask(masks::causal_lower_right(Tq, Tk), 1, 1, Tq, Tk);
  for (int which = 0; which < 2; ++which) {
    SCOPED_TRACE(which == 0 ? "alibi" : "softcap");
    AttentionOptions o;
    o.causal = Causal::bottom_right;
    if (which == 0) o.alibi_slopes = slopes;
    if (which == 1) o.softcap = 2.0;
    o.backend = Backend::reference;
    const AttentionOutput f = attention_forward(in.q, in.k, in.v, o);
    const AttentionGrads g = attention_backward(in.dout, in.q, in.k, in.v, f.out, f.lse, o);
    for (const Backend backend : {Backend::cpu, Backend::reference}) {
      FlexOptions fo;
      fo.backend = backend;
      const auto run = [&](auto mod) {
        const AttentionOutput x = flex_attention(in.q, in.k, in.v, mod, causal, fo);
        const AttentionGrads y =
            flex_attention_backward(in.dout, in.q, in.k, in.v, x.out, x.lse, mod, causal, fo);
        return Results{x.out, x.lse, y.dq, y.dk, y.dv};
      };
      const Results r = which == 0 ? run(alibi) : run(softcap);
      EXPECT_LE(max_error(r.out, f.out), 1e-12);
      EXPECT_LE(max_error(r.lse, f.lse), 1e-12);
      EXPECT_LE(max_error(r.dq, g.dq), 1e-11);
      EXPECT_LE(max_error(r.dk, g.dk), 1e-11);
      EXPECT_LE(max_error(r.dv, g.dv), 1e-11);
    }
  }
}

// The gradient of flex with a nonlinear score mod against central differences of
// L = sum(dout * out), in f64, on both backends.
TEST(FlexAttention, GradientsMatchFiniteDifferences) {
  const std::int64_t B = 1, Tq = 9, Tk = 11, Hq = 2, Hk = 1, D = 4;
  const Inputs in = inputs(B, Tq, Tk, Hq, Hk, D, DType::f64, 21);
  auto mod = [](auto s, std::int64_t, std::int64_t h, std::int64_t i, std::int64_t j) {
    return 1.5 * qkv::tanh(s / 1.5) * (1.0 + 0.1 * static_cast<double>(h)) +
           0.05 * static_cast<double>(i - j);
  };
  const BlockMask blocks = create_block_mask(masks::sliding_window(4, 2, Tk - Tq), 1, Hq, Tq, Tk);
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

// The tiles the fused kernel works on are the block mask's non-empty ones: a score mod records
// every (b, h, q-block, k-block) it is evaluated in. Small K and V (64-row forward blocks).
TEST(FlexAttention, KernelSkipsExactlyTheEmptyTiles) {
  const std::int64_t B = 2, H = 2, Tq = 300, Tk = 330;
  const Inputs in = inputs(B, Tq, Tk, H, H, 16, DType::f32, 8);
  for (const MaskCase& m : mask_cases(Tq, Tk)) {
    if (m.square_only) continue;
    SCOPED_TRACE(m.name);
    const BlockMask blocks = m.make(B, H, Tq, Tk);
    std::mutex lock;
    std::set<std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t>> forward, backward;
    auto* seen = &forward;
    auto record = [&](auto s, std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) {
      const std::lock_guard<std::mutex> hold(lock);
      seen->insert({b, h, i / blocks.block_q(), j / blocks.block_k()});
      return s;
    };
    const AttentionOutput f = flex_attention(in.q, in.k, in.v, record, blocks);
    seen = &backward;
    flex_attention_backward(in.dout, in.q, in.k, in.v, f.out, f.lse, record, blocks);
    std::int64_t kept = 0;
    for (std::int64_t b = 0; b < B; ++b) {
      for (std::int64_t h = 0; h < H; ++h) {
        for (std::int64_t qb = 0; qb < blocks.q_blocks(); ++qb) {
          for (std::int64_t kb = 0; kb < blocks.k_blocks(); ++kb) {
            const bool work = blocks.kind(b, h, qb, kb) != TileKind::empty;
            kept += work;
            EXPECT_EQ(forward.count({b, h, qb, kb}), work ? 1u : 0u);
            EXPECT_EQ(backward.count({b, h, qb, kb}), work ? 1u : 0u);
          }
        }
      }
    }
    const std::int64_t all = B * H * blocks.q_blocks() * blocks.k_blocks();
    const std::int64_t empty = (blocks.batches() == 1 ? B : 1) * (blocks.heads() == 1 ? H : 1) *
                               blocks.count(TileKind::empty);
    EXPECT_EQ(all - kept, empty);
  }
}

// A padding mask given as a keep-mask tensor gives what key_lengths gives: its tiles are
// classified once, so full tiles skip the mask as with lengths.
TEST(FlexAttention, KeepMaskTensorEqualsLengths) {
  const std::int64_t B = 3, T = 300;
  const Inputs in = inputs(B, T, T, 2, 2, 16, DType::f32, 4);
  AttentionOptions by_lengths;
  by_lengths.key_lengths = {300, 190, 64};
  AttentionOptions by_tensor;
  by_tensor.mask = Tensor::zeros({B, 1, 1, T}, DType::boolean);
  for (std::int64_t b = 0; b < B; ++b) {
    for (std::int64_t j = 0; j < by_lengths.key_lengths[b]; ++j)
      by_tensor.mask.set({b, 0, 0, j}, 1);
  }
  const AttentionOutput x = attention_forward(in.q, in.k, in.v, by_lengths);
  const AttentionOutput y = attention_forward(in.q, in.k, in.v, by_tensor);
  EXPECT_EQ(max_error(x.out, y.out), 0.0);
  EXPECT_EQ(max_error(x.lse, y.lse), 0.0);
  const AttentionGrads gx = attention_backward(in.dout, in.q, in.k, in.v, x.out, x.lse, by_lengths);
  const AttentionGrads gy = attention_backward(in.dout, in.q, in.k, in.v, y.out, y.lse, by_tensor);
  EXPECT_EQ(max_error(gx.dq, gy.dq), 0.0);
  EXPECT_EQ(max_error(gx.dk, gy.dk), 0.0);
  EXPECT_EQ(max_error(gx.dv, gy.dv), 0.0);
}

TEST(FlexAttention, DeterministicOverThreadCounts) {
  const std::int64_t T = 333;
  const Inputs in = inputs(2, T, T, 4, 2, 32, DType::f32, 9);
  const BlockMask blocks = create_block_mask(masks::bigbird(64, 3, 1, 2, 5, T, T, 4), 1, 4, T, T);
  auto mod = [](auto s, std::int64_t, std::int64_t h, std::int64_t i, std::int64_t j) {
    return s + 0.01 * static_cast<double>((i - j) % 17) * static_cast<double>(h);
  };
  std::vector<std::vector<double>> first;
  const int budget = num_threads();
  for (const int threads : {1, 2, 3, 1}) {
    set_num_threads(threads);
    const AttentionOutput f = flex_attention(in.q, in.k, in.v, mod, blocks);
    const AttentionGrads g =
        flex_attention_backward(in.dout, in.q, in.k, in.v, f.out, f.lse, mod, blocks);
    std::vector<std::vector<double>> now = {f.out.to_vector(), f.lse.to_vector(), g.dq.to_vector(),
                                            g.dk.to_vector(), g.dv.to_vector()};
    if (first.empty()) {
      first = now;
    } else {
      EXPECT_EQ(now, first) << threads << " threads";
    }
  }
  set_num_threads(budget);
}

TEST(FlexAttention, RefusesMismatchedBlockMasksAndBadMods) {
  const Inputs in = inputs(2, 100, 120, 4, 2, 16, DType::f32, 1);
  expect_error(
      [&] { flex_attention(in.q, in.k, in.v, create_block_mask(masks::causal(), 1, 1, 120, 120)); },
      "Tq");
  expect_error(
      [&] { flex_attention(in.q, in.k, in.v, create_block_mask(masks::causal(), 3, 1, 100, 120)); },
      "batches");
  expect_error(
      [&] { flex_attention(in.q, in.k, in.v, create_block_mask(masks::causal(), 1, 2, 100, 120)); },
      "heads");
  expect_error([] { masks::document({1, 1, 2, 1}); }, "contiguous");
  expect_error([] { masks::strided(0); }, "stride");
  expect_error([] { masks::bigbird(16, 3, -1, 2, 0, 64, 64); }, "global_blocks");
  expect_error([] { masks::fixed(8, 9); }, "summary");
  expect_error([] { create_block_mask(masks::causal(), 0, 1, 8, 8); }, "B");
}

// The calls into the caller's tensors refuse a wrong shape or dtype, outputs that share memory
// with each other or with an input, and leave every output as it was.
TEST(FlexAttention, IntoTheCallersTensorsRefusesBadOutputsAndWritesNothing) {
  const Inputs in = inputs(2, 100, 120, 4, 2, 16, DType::f32, 1);
  const BlockMask blocks = create_block_mask(masks::causal(), 1, 1, 100, 120);
  const AttentionOutput f = flex_attention(in.q, in.k, in.v, blocks);
  const auto sentinel = [](const Shape& shape, DType dtype) {
    Tensor t = Tensor::empty(shape, dtype);
    t.fill(7.0);
    return t;
  };
  const auto untouched = [](const Tensor& t) {
    const std::vector<double> v = t.to_vector();
    return std::all_of(v.begin(), v.end(), [](double x) { return x == 7.0; });
  };

  Tensor out = sentinel(f.out.shape(), DType::f32), lse = sentinel(f.lse.shape(), DType::f32);
  Tensor short_out = sentinel({2, 99, 4, 16}, DType::f32);
  expect_error([&] { flex_attention(in.q, in.k, in.v, blocks, {}, short_out, lse); }, "out");
  Tensor lse_f64 = sentinel(f.lse.shape(), DType::f64);
  expect_error([&] { flex_attention(in.q, in.k, in.v, blocks, {}, out, lse_f64); }, "lse");
  Tensor q_copy = in.q.clone();
  Tensor on_q = q_copy;
  expect_error([&] { flex_attention(q_copy, in.k, in.v, blocks, {}, on_q, lse); }, "input");
  Tensor both = sentinel({2 * 4 * 100 * 16}, DType::f32);
  Tensor out_view = both.view({2, 100, 4, 16}), lse_view = both.slice(0, 0, 800).view({2, 4, 100});
  expect_error([&] { flex_attention(in.q, in.k, in.v, blocks, {}, out_view, lse_view); }, "lse");
  EXPECT_TRUE(untouched(out) && untouched(lse) && untouched(short_out) && untouched(lse_f64) &&
              untouched(both));

  AttentionGrads g;
  g.dq = sentinel(in.q.shape(), DType::f32);
  g.dk = sentinel(in.k.shape(), DType::f32);
  g.dv = g.dk;  // the same memory as dk
  const auto backward = [&] {
    flex_attention_backward(in.dout, in.q, in.k, in.v, f.out, f.lse, blocks, {}, g);
  };
  expect_error(backward, "grads");
  g.dv = sentinel({2, 120, 2, 8}, DType::f32);
  expect_error(backward, "grads.dv");
  const Tensor v_before = in.v.clone();
  g.dv = in.v;  // writing dv would change v as it is read
  expect_error(backward, "input");
  EXPECT_TRUE(untouched(g.dq) && untouched(g.dk));
  EXPECT_TRUE(bitwise_equal({in.v.to_vector()}, {v_before.to_vector()}));
}

// bf16 and f16 inputs may write f32 outputs through the into forms: the kernels' f32 result, which
// the 16-bit outputs are the rounding of (bit for bit, on every path the CPU has: bf16 products
// from 1024 keys where it has them). Other dtypes stay refused.
TEST(FlexAttention, HalfInputsWriteF32OutputsTheyRoundTo) {
  const BlockMask blocks = create_block_mask(masks::sliding_window(700, 100), 1, 1, 60, 1100);
  for (const DType dtype : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const Inputs in = inputs(1, 60, 1100, 4, 2, 32, dtype, 3);
    const AttentionOutput rounded = flex_attention(in.q, in.k, in.v, blocks);
    AttentionOutput wide{Tensor::empty(rounded.out.shape(), DType::f32),
                         Tensor::empty(rounded.lse.shape(), DType::f32)};
    flex_attention(in.q, in.k, in.v, blocks, {}, wide.out, wide.lse);
    EXPECT_TRUE(bitwise_equal({wide.out.to(dtype).to_vector(), wide.lse.to_vector()},
                              {rounded.out.to_vector(), rounded.lse.to_vector()}));

    const AttentionGrads g16 =
        flex_attention_backward(in.dout, in.q, in.k, in.v, rounded.out, rounded.lse, blocks);
    AttentionGrads g32;
    g32.dq = Tensor::empty(in.q.shape(), DType::f32);
    g32.dk = Tensor::empty(in.k.shape(), DType::f32);
    g32.dv = Tensor::empty(in.v.shape(), DType::f32);
    flex_attention_backward(in.dout, in.q, in.k, in.v, rounded.out, rounded.lse, blocks, {}, g32);
    EXPECT_TRUE(bitwise_equal(
        {g32.dq.to(dtype).to_vector(), g32.dk.to(dtype).to_vector(), g32.dv.to(dtype).to_vector()},
        {g16.dq.to_vector(), g16.dk.to_vector(), g16.dv.to_vector()}));

    Tensor out64 = Tensor::empty(rounded.out.shape(), DType::f64);
    Tensor lse = wide.lse;
    expect_error([&] { flex_attention(in.q, in.k, in.v, blocks, {}, out64, lse); }, "out");
  }
  const Inputs f32 = inputs(1, 60, 1100, 4, 2, 32, DType::f32, 3);
  Tensor out64 = Tensor::empty({1, 60, 4, 32}, DType::f64), lse = Tensor::empty({1, 4, 60});
  expect_error([&] { flex_attention(f32.q, f32.k, f32.v, blocks, {}, out64, lse); }, "out");
}

}  // namespace
}  // namespace qkv::testing
