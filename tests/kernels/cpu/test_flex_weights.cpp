// flex_attention_weights: P with any mods on the fused kernels, against the reference backend's
// dense P (f64 to rounding, f32 within twice the f32 reference's error), against attention_weights
// for the mods that equal built-in options, the runtime ScoreMod against the lambda bitwise, and
// the invariants: rows sum to 1, exactly 0 where the mask drops, rows the mask empties all 0.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "fused_case.hpp"
#include "qkv/qkv.hpp"

namespace qkv::testing {
namespace {

struct Inputs {
  Tensor q, k;
};

// q [B, Tq, Hq, D], k [B, Tk, Hk, D].
Inputs make(std::int64_t B, std::int64_t Tq, std::int64_t Tk, std::int64_t Hq, std::int64_t Hk,
            std::int64_t D, DType dtype) {
  Generator g(17);
  return {Tensor::randn({B, Tq, Hq, D}, g, dtype), Tensor::randn({B, Tk, Hk, D}, g, dtype)};
}

const auto kAlibi = [](auto s, std::int64_t, std::int64_t h, std::int64_t i, std::int64_t j) {
  return s - 0.25 * static_cast<double>(h + 1) * static_cast<double>(i >= j ? i - j : j - i);
};

TEST(FlexWeights, FusedEqualsTheReferenceWithEveryPattern) {
  const std::int64_t B = 2, T = 150, Hq = 4, Hk = 2, D = 16;
  std::vector<std::int64_t> ids(T);
  for (std::int64_t t = 0; t < T; ++t) ids[static_cast<std::size_t>(t)] = t * 3 / T;
  const std::vector<BlockMask> masks = {
      create_block_mask(masks::causal(), 1, 1, T, T),
      create_block_mask(masks::sliding_window(20, 7), 1, 1, T, T),
      create_block_mask(and_masks(masks::causal(), masks::document(ids)), 1, 1, T, T),
      create_block_mask(masks::bigbird(16, 3, 1, 2, 5, T, T, Hq), 1, Hq, T, T),
      create_block_mask(masks::key_lengths({T, 40}), B, 1, T, T),
  };
  for (const DType dtype : {DType::f64, DType::f32}) {
    const Inputs in = make(B, T, T, Hq, Hk, D, dtype);
    for (std::size_t m = 0; m < masks.size(); ++m) {
      FlexOptions fused, reference;
      reference.backend = Backend::reference;
      const Tensor got = flex_attention_weights(in.q, in.k, kAlibi, masks[m], fused);
      const Tensor want = flex_attention_weights(in.q, in.k, kAlibi, masks[m], reference);
      if (dtype == DType::f64) {
        EXPECT_LT(max_error(got, want), 1e-13) << "mask " << m;
      } else {  // the suite's f32 rule: at most 2x the f32 reference's error against f64
        const Tensor oracle = flex_attention_weights(in.q.to(DType::f64), in.k.to(DType::f64),
                                                     kAlibi, masks[m], reference);
        EXPECT_LE(max_error(got, oracle), 2 * max_error(want, oracle) + 1e-6) << "mask " << m;
      }
      // Rows sum to 1 (or are empty), dropped pairs exactly 0.
      const BlockMask& bm = masks[m];
      for (std::int64_t b = 0; b < B; ++b) {
        for (std::int64_t h = 0; h < Hq; ++h) {
          for (std::int64_t i = 0; i < T; i += 7) {
            double sum = 0;
            bool any = false;
            for (std::int64_t j = 0; j < T; ++j) {
              const double p = got.at({b, h, i, j});
              const bool keep = bm.keep(bm.batches() == 1 ? 0 : b, bm.heads() == 1 ? 0 : h, i, j);
              if (!keep) {
                ASSERT_EQ(p, 0.0) << m << " " << b << " " << h << " " << i << " " << j;
              }
              any = any || keep;
              sum += p;
            }
            EXPECT_NEAR(sum, any ? 1.0 : 0.0, dtype == DType::f64 ? 1e-12 : 1e-5);
          }
        }
      }
    }
  }
}

TEST(FlexWeights, EqualTheBuiltInOptionsAndTheRuntimeValue) {
  const std::int64_t T = 90;
  const Inputs in = make(1, T, T, 4, 4, 32, DType::f64);
  AttentionOptions o;
  o.causal = Causal::top_left;
  o.window = {-1, 0};
  o.alibi_slopes = {0.5, 0.25, 0.125, 0.0625};
  const Tensor builtin = attention_weights(in.q, in.k, o);
  const BlockMask causal = create_block_mask(masks::causal(), 1, 1, T, T);
  const Tensor value = flex_attention_weights(in.q, in.k, scores::alibi(o.alibi_slopes), causal);
  EXPECT_LT(max_error(value, builtin), 1e-13);
  const auto lambda = [slopes = o.alibi_slopes](auto s, std::int64_t, std::int64_t h,
                                                std::int64_t i, std::int64_t j) {
    return s - slopes[static_cast<std::size_t>(h)] * static_cast<double>(i >= j ? i - j : j - i);
  };
  EXPECT_LT(max_error(flex_attention_weights(in.q, in.k, lambda, causal), builtin), 1e-13);
  // No mods at all: softmax over every key.
  EXPECT_LT(
      max_error(flex_attention_weights(in.q, in.k, BlockMask()), attention_weights(in.q, in.k)),
      1e-13);
}

}  // namespace
}  // namespace qkv::testing
