// The fused forward reading K and V in bf16 or f16 as they lie (kernels/half_kv.hpp): the decode
// kernel as it streams them, the tiled one as it packs its tiles. Every 16-bit value converts to
// f32 exactly and the kernels compute in f32, so the results must be the very bits of the same
// call on the inputs converted to f32 first, on every SIMD target, with every option and with
// flex mods; and within FlashAttention's rule of the f64 reference. (Where this CPU has bf16
// matrix units, the tiled forward of bf16 q, k and v computes in bf16 products instead: those
// bit-for-bit tests force the f32 path; test_bf16_forward.cpp tests the other.)
#include <gtest/gtest.h>
#include <hwy/targets.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "kernels/cpu/bf16_gemm.hpp"
#include "kernels/cpu/fused_case.hpp"
#include "qkv/qkv.hpp"

namespace qkv::testing {
namespace {

using kernels::cpu::ForcedFusedPath;

struct HalfCase {
  FusedCase shape;
  DType dtype;
};

std::string describe(const HalfCase& c) {
  return c.shape.name() + "_" + std::string(dtype_name(c.dtype));
}

// The same call on q, k, v (and bias) converted to f32, outputs rounded back to the 16-bit dtype.
AttentionOutput converted_first(const FusedInputs& in, const AttentionOptions& options,
                                DType dtype) {
  AttentionOptions o = options;
  if (o.bias.defined()) o.bias = o.bias.to(DType::f32);
  AttentionOutput r =
      attention_forward(in.q.to(DType::f32), in.k.to(DType::f32), in.v.to(DType::f32), o);
  r.out = r.out.to(dtype);
  return r;
}

class HalfKv : public ::testing::TestWithParam<HalfCase> {};

TEST_P(HalfKv, SameBitsAsTheCacheConvertedFirstOnEveryTarget) {
  const HalfCase& c = GetParam();
  const ForcedFusedPath f32_path(std::nullopt);
  const FusedInputs in = make_inputs(c.shape, c.dtype);
  AttentionOptions options = in.options;
  options.backend = Backend::cpu;
  int tested = 0;
  for (const std::int64_t target : hwy::SupportedAndGeneratedTargets()) {
    SCOPED_TRACE(hwy::TargetName(target));
    hwy::SetSupportedTargetsForTest(target);
    const AttentionOutput got = attention_forward(in.q, in.k, in.v, options);
    const AttentionOutput want = converted_first(in, options, c.dtype);
    EXPECT_EQ(got.out.dtype(), c.dtype);
    EXPECT_EQ(got.lse.dtype(), DType::f32);
    EXPECT_TRUE(bitwise_equal({got.out.to_vector(), got.lse.to_vector()},
                              {want.out.to_vector(), want.lse.to_vector()}));
    ++tested;
  }
  hwy::SetSupportedTargetsForTest(0);
  EXPECT_GE(tested, 2);
}

// FlashAttention's rule: the error of out against the f64 reference at most twice that of the
// reference computed from the same 16-bit inputs and rounded to the same dtype (plus a rounding
// unit of f32 for rows whose reference error is 0). Dropout draws the same mask in every backend.
TEST_P(HalfKv, WithinTwiceTheLowPrecisionReferencesError) {
  const HalfCase& c = GetParam();
  const FusedInputs in = make_inputs(c.shape, c.dtype);
  AttentionOptions cpu = in.options, ref = in.options, ref64 = in.options;
  cpu.backend = Backend::cpu;
  ref.backend = ref64.backend = Backend::reference;
  if (ref64.bias.defined()) ref64.bias = ref64.bias.to(DType::f64);
  const AttentionOutput exact =
      attention_forward(in.q.to(DType::f64), in.k.to(DType::f64), in.v.to(DType::f64), ref64);
  const AttentionOutput low = attention_forward(in.q, in.k, in.v, ref);
  const AttentionOutput got = attention_forward(in.q, in.k, in.v, cpu);
  const double slack = 1e-6 * std::max(1.0, max_abs(exact.out));
  EXPECT_LE(max_error(got.out, exact.out), 2 * max_error(low.out, exact.out) + slack);
  EXPECT_LE(max_error(got.lse, exact.lse), 2 * max_error(low.lse, exact.lse) + 1e-5);
}

std::vector<HalfCase> cases() {
  std::vector<FusedCase> shapes;
  FusedCase one;  // a single query, GQA, a causal cache over two splits, padded batches
  one.B = 3;
  one.Tq = 1;
  one.Tk = 2100;
  one.Hq = 8;
  one.Hk = 2;
  one.D = one.Dv = 128;
  one.causal = Causal::bottom_right;
  one.padding = true;
  shapes.push_back(one);
  FusedCase few = one;  // D and Dv off the vector width (the scalar tails), a window, ALiBi, cap
  few.B = 1;
  few.Tq = 4;
  few.Tk = 700;
  few.D = 37;
  few.Dv = 21;
  few.Hq = 6;
  few.Hk = 3;
  few.padding = false;
  few.causal = Causal::none;
  few.window = {200, 0};
  few.alibi = true;
  few.softcap = 20.0;
  shapes.push_back(few);
  FusedCase most = one;  // the most decode rows, a bias, a keep-mask, dropout, heads-first views
  most.B = 2;
  most.Tq = 16;
  most.Tk = 1500;
  most.D = most.Dv = 64;
  most.Hq = most.Hk = 4;
  most.padding = false;
  most.causal = Causal::none;
  most.bias = most.mask = true;
  most.dropout = 0.1;
  most.strided = true;
  shapes.push_back(most);
  FusedCase tiled = one;  // the tiled forward: q-blocks of 64 and 128 rows, a ragged last tile
  tiled.B = 2;
  tiled.Tq = 150;
  tiled.Tk = 333;
  tiled.Hq = 4;
  tiled.D = 40;
  tiled.Dv = 24;
  tiled.causal = Causal::top_left;
  tiled.bias = true;
  tiled.dropout = 0.2;
  shapes.push_back(tiled);
  FusedCase wide = most;  // K and V of more than 1 MiB a head: 128-row q-blocks
  wide.B = 1;
  wide.Tq = 300;
  wide.Tk = 2200;
  wide.Hq = 2;
  wide.Hk = 1;
  wide.D = wide.Dv = 128;
  wide.bias = false;
  wide.dropout = 0.0;
  wide.softcap = 30.0;
  wide.window = {500, 100};
  shapes.push_back(wide);
  std::vector<HalfCase> out;
  for (const FusedCase& s : shapes) {
    for (const DType t : {DType::bf16, DType::f16}) out.push_back({s, t});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Caches, HalfKv, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<HalfCase>& info) {
                           return describe(info.param);
                         });

// A KV cache as engines keep one: [B, Hk, capacity, D] in f16, read through a permuted view of
// its first Tk positions, with NaN in the keys and values past each batch's length (never read
// into a result); flex_attention with a score mod over it gives the bits of the converted call.
TEST(HalfKv, ReadsACacheViewAndNeverItsUnusedTail) {
  const ForcedFusedPath f32_path(std::nullopt);
  const std::int64_t B = 2, Hq = 8, Hk = 2, capacity = 4096, Tk = 3000, D = 128, Tq = 2;
  Generator g(11);
  const auto cache = [&] {
    return Tensor::randn({B, Hk, capacity, D}, g, DType::f64).to(DType::f16);
  };
  Tensor k_cache = cache(), v_cache = cache();
  const std::vector<std::int64_t> lengths = {2500, 1999};
  for (Tensor* t : {&k_cache, &v_cache}) {
    for (std::int64_t b = 0; b < B; ++b) {
      Tensor tail = t->slice(0, b, b + 1).slice(2, lengths[b], capacity);
      tail.fill(std::numeric_limits<double>::quiet_NaN());
    }
  }
  const Tensor k = k_cache.slice(2, 0, Tk).permute({0, 2, 1, 3});
  const Tensor v = v_cache.slice(2, 0, Tk).permute({0, 2, 1, 3});
  const Tensor q = Tensor::randn({B, Tq, Hq, D}, g, DType::f64).to(DType::f16);
  FlexOptions options;
  options.backend = Backend::cpu;
  const BlockMask blocks = create_block_mask(
      and_masks(masks::causal_lower_right(Tq, Tk), masks::key_lengths(lengths)), B, 1, Tq, Tk);
  const auto tilt = [](auto s, std::int64_t, std::int64_t h, std::int64_t i, std::int64_t j) {
    return s - 0.01 * static_cast<double>(h + 1) * static_cast<double>(i - j);
  };
  const AttentionOutput got = flex_attention(q, k, v, tilt, blocks, options);
  AttentionOutput want =
      flex_attention(q.to(DType::f32), k.to(DType::f32), v.to(DType::f32), tilt, blocks, options);
  want.out = want.out.to(DType::f16);
  EXPECT_TRUE(bitwise_equal({got.out.to_vector(), got.lse.to_vector()},
                            {want.out.to_vector(), want.lse.to_vector()}));
  for (const double x : got.out.to_vector()) ASSERT_TRUE(std::isfinite(x));
}

// The cpu backend's result on a 16-bit q, k, v, checked to be the bits of the same call on them
// converted to f32 (out rounded back); returns the f32 call's.
AttentionOutput same_bits_as_f32(const Tensor& q, const Tensor& k, const Tensor& v,
                                 const AttentionOptions& options) {
  const AttentionOutput got = attention_forward(q, k, v, options);
  AttentionOutput f32 =
      attention_forward(q.to(DType::f32), k.to(DType::f32), v.to(DType::f32), options);
  EXPECT_TRUE(bitwise_equal({got.out.to_vector(), got.lse.to_vector()},
                            {f32.out.to(q.dtype()).to_vector(), f32.lse.to_vector()}));
  return f32;
}

// The reference's outputs for q, k and v computed in f64 (exact) and in f32 (low), whose error
// FlashAttention's rule doubles into the kernel's allowance.
struct References {
  AttentionOutput exact, low;
};

References references(const Tensor& q, const Tensor& k, const Tensor& v) {
  AttentionOptions reference;
  reference.backend = Backend::reference;
  return {attention_forward(q.to(DType::f64), k.to(DType::f64), v.to(DType::f64), reference),
          attention_forward(q.to(DType::f32), k.to(DType::f32), v.to(DType::f32), reference)};
}

// check(out) for the fused CPU kernel's output on q, k and v (same_bits_as_f32) on every SIMD
// target this CPU runs.
template <class Check>
void on_every_target(const Tensor& q, const Tensor& k, const Tensor& v, Check check) {
  AttentionOptions options;
  options.backend = Backend::cpu;
  for (const std::int64_t target : hwy::SupportedAndGeneratedTargets()) {
    SCOPED_TRACE(hwy::TargetName(target));
    hwy::SetSupportedTargetsForTest(target);
    check(same_bits_as_f32(q, k, v, options));
  }
  hwy::SetSupportedTargetsForTest(0);
}

// Infinities and NaNs in an f16 cache read as their f32 conversion gives them, on every target:
// Highway 1.0.3's software conversion (x86 below AVX2, EMU128, SCALAR) read them as finite
// numbers of 2^16 and more (load_as-inl.h). A decode (split keys) and a prefill (tiles), each
// with a NaN and an infinity in K and a NaN and infinities in V, in different heads.
TEST(HalfKv, InfinitiesAndNaNsReadAsConvertedOnEveryTarget) {
  const ForcedFusedPath f32_path(std::nullopt);
  constexpr double kInf = std::numeric_limits<double>::infinity();
  constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  for (const std::int64_t Tq : {1, 40}) {
    SCOPED_TRACE("Tq " + std::to_string(Tq));
    const std::int64_t H = 6, Tk = 300, D = 40;
    Generator g(3);
    const Tensor q = Tensor::randn({1, Tq, H, D}, g, DType::f64).to(DType::f16);
    Tensor k = Tensor::randn({1, Tk, H, D}, g, DType::f64).to(DType::f16);
    Tensor v = Tensor::randn({1, Tk, H, D}, g, DType::f64).to(DType::f16);
    k.set({0, 17, 0, 3}, kNaN);
    k.set({0, 250, 1, 0}, -kInf);
    v.set({0, 100, 2, 7}, kNaN);
    v.set({0, 5, 3, 39}, kInf);
    v.set({0, 6, 4, 0}, -kInf);
    AttentionOptions options;
    options.backend = Backend::cpu;
    int tested = 0;
    for (const std::int64_t target : hwy::SupportedAndGeneratedTargets()) {
      SCOPED_TRACE(hwy::TargetName(target));
      hwy::SetSupportedTargetsForTest(target);
      const AttentionOutput got = same_bits_as_f32(q, k, v, options);
      // Head 0 reads a NaN key, heads 2-4 a NaN or infinite value: not finite. Head 5 is.
      for (const std::int64_t h : {0, 2, 3, 4}) {
        EXPECT_FALSE(std::isfinite(got.out.at({0, 0, h, h == 2 ? 7 : h == 3 ? 39 : 0})));
      }
      const std::vector<double> last = got.out.slice(2, 5, 6).to_vector();
      EXPECT_TRUE(std::all_of(last.begin(), last.end(), [](double x) { return std::isfinite(x); }));
      ++tested;
    }
    hwy::SetSupportedTargetsForTest(0);
    EXPECT_GE(tested, 2);
  }
}

// A cache past the decode's key-by-key threshold (flash_decode.cpp, kOnlineMinElements: K and V
// of more than 20M elements in [B, T, H, D]), the path no smaller test reaches: the bits of the
// cache converted to f32 first, the f64 reference's output within FlashAttention's rule, and a
// NaN in one key's K row reaching exactly the head that reads it. Tk is no multiple of a tile's
// keys (kBk), so the last tile holds 3.
TEST(HalfKv, LargeCacheDecodedKeyByKey) {
  const ForcedFusedPath f32_path(std::nullopt);
  const std::int64_t B = 1, H = 8, Tk = 12803, D = 128;  // 26.2M elements of K and V
  Generator g(21);
  const Tensor q = Tensor::randn({B, 1, H, D}, g, DType::f64).to(DType::f16);
  Tensor k = Tensor::randn({B, Tk, H, D}, g, DType::f64).to(DType::f16);
  const Tensor v = Tensor::randn({B, Tk, H, D}, g, DType::f64).to(DType::f16);
  k.set({0, 7000, 3, 5}, std::numeric_limits<double>::quiet_NaN());
  const References ref = references(q, k, v);
  // Every SIMD target this CPU runs: the online step goes over the rows a vector at a time, 8
  // rows in half of an AVX-512 vector, in one of AVX2's, in two of SSE4's.
  on_every_target(q, k, v, [&](const AttentionOutput& f32) {
    for (std::int64_t h = 0; h < H; ++h) {
      SCOPED_TRACE("head " + std::to_string(h));
      const Tensor out = f32.out.slice(2, h, h + 1), want = ref.exact.out.slice(2, h, h + 1);
      if (h == 3) {
        for (const double x : out.to_vector()) EXPECT_TRUE(std::isnan(x));
        EXPECT_TRUE(std::isnan(f32.lse.at({0, h, 0})));
        continue;
      }
      const std::vector<double> values = out.to_vector();
      EXPECT_TRUE(
          std::all_of(values.begin(), values.end(), [](double x) { return std::isfinite(x); }));
      const double slack = 2.0 * max_error(ref.low.out.slice(2, h, h + 1), want);
      EXPECT_LE(max_error(out, want), slack + 1e-6 * max_abs(want));
      EXPECT_NEAR(f32.lse.at({0, h, 0}), ref.exact.lse.at({0, h, 0}), 1e-5);
    }
  });
}

// The same key-by-key path with several query rows per k/v head: the 2 heads of a GQA group of
// 2 (Hq 8 over Hk 4), rows that each key's online step moves together (it takes up to 2 a k/v
// head: flash_decode.cpp, kOnlineRows), against the f64 reference within FlashAttention's rule,
// on every SIMD target this CPU runs.
TEST(HalfKv, LargeCacheGroupRowsDecodedKeyByKey) {
  const ForcedFusedPath f32_path(std::nullopt);
  const std::int64_t Hq = 8, Hk = 4, Tq = 1, Tk = 24003, D = 128;  // 24.6M elements of K and V
  Generator g(22);
  const Tensor q = Tensor::randn({1, Tq, Hq, D}, g, DType::f64).to(DType::f16);
  const Tensor k = Tensor::randn({1, Tk, Hk, D}, g, DType::f64).to(DType::f16);
  const Tensor v = Tensor::randn({1, Tk, Hk, D}, g, DType::f64).to(DType::f16);
  const References ref = references(q, k, v);
  on_every_target(q, k, v, [&](const AttentionOutput& f32) {
    const double slack = 2.0 * max_error(ref.low.out, ref.exact.out);
    EXPECT_LE(max_error(f32.out, ref.exact.out), slack + 1e-6 * max_abs(ref.exact.out));
    EXPECT_LE(max_error(f32.lse, ref.exact.lse), 1e-5);
  });
}

// f16 inputs near its largest value (6e4) at D = 256: q . k reaches ~9e11, far past f16's range;
// the kernels scale and sum in f32, so nothing overflows, and the output is the reference's.
class F16Range : public ::testing::TestWithParam<std::int64_t> {};

TEST_P(F16Range, NeverOverflows) {
  const std::int64_t Tq = GetParam(), Tk = 1200, H = 2, D = 256;
  Generator g(5);
  const auto big = [&](std::int64_t T) {
    return Tensor::uniform({1, T, H, D}, 5.5e4, 6.5e4, g, DType::f64).to(DType::f16);
  };
  const Tensor q = big(Tq), k = big(Tk), v = big(Tk);
  AttentionOptions cpu, ref64;
  cpu.backend = Backend::cpu;
  ref64.backend = Backend::reference;
  const AttentionOutput got = attention_forward(q, k, v, cpu);
  const AttentionOutput exact =
      attention_forward(q.to(DType::f64), k.to(DType::f64), v.to(DType::f64), ref64);
  for (const double x : got.out.to_vector()) ASSERT_TRUE(std::isfinite(x));
  for (const double x : got.lse.to_vector()) ASSERT_TRUE(std::isfinite(x));
  // out rounded to f16 (an ulp of 32 at 6e4): within one ulp of the f64 reference.
  EXPECT_LE(max_error(got.out, exact.out), 32.0);
  EXPECT_LE(max_error(got.lse, exact.lse), 1e-6 * max_abs(exact.lse));
}

INSTANTIATE_TEST_SUITE_P(DecodeAndTiled, F16Range, ::testing::Values(3, 100));

}  // namespace
}  // namespace qkv::testing
