// The CPU's own bf16 roundings (kernels/cpu/exp_round_bf16.hpp) against qkv::f32_to_bf16_bits,
// value by value, and the one-pass softmax row against exp_softmax's values rounded: the same
// bits but for subnormal results, which the instructions flush to zero. Where the CPU lacks
// AVX512-BF16 the functions are null and the test says so.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu/entry.hpp"
#include "kernels/cpu/exp_round_bf16.hpp"
#include "qkv/half.hpp"

namespace qkv::kernels::cpu {
namespace {

bool native_here() {
  if (native_exp_round_row() != nullptr) return true;
  std::printf("[ NOTE     ] not run here (no AVX512-BF16): the CPU's bf16 roundings\n");
  return false;
}

// Values of every kind: normal of many sizes, ties to even, signed zeros, infinities, NaNs.
std::vector<float> mixed_values(std::int64_t n, std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<float> x(static_cast<size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    const std::uint32_t bits = gen();
    switch (i % 9) {
      case 0:
        x[i] = std::numeric_limits<float>::infinity() * (bits & 1 ? 1.0f : -1.0f);
        break;
      case 1:
        x[i] = std::numeric_limits<float>::quiet_NaN();
        break;
      case 2:
        x[i] = bits & 1 ? 0.0f : -0.0f;
        break;
      case 3:  // a tie in [1, 2) or (-2, -1]: the low 16 bits exactly half a bf16 unit
        x[i] = std::bit_cast<float>((bits & 0x807f0000u) | 0x3f800000u | 0x8000u);
        break;
      default:
        x[i] = std::ldexp(static_cast<float>(bits % 100000) / 1000.0f - 50.0f,
                          static_cast<int>(bits % 61) - 30);
    }
  }
  return x;
}

bool same_bf16(std::uint16_t got, std::uint16_t want) {
  const bool nan_got = (got & 0x7f80u) == 0x7f80u && (got & 0x7fu) != 0;
  const bool nan_want = (want & 0x7f80u) == 0x7f80u && (want & 0x7fu) != 0;
  return nan_got || nan_want ? nan_got && nan_want : got == want;
}

TEST(NativeBf16Rounding, RunsAndPairsRoundAsQkvDoes) {
  if (!native_here()) return;
  const RoundRun run = native_round_run();
  const RoundPairs pairs = native_round_pairs();
  ASSERT_NE(run, nullptr);
  ASSERT_NE(pairs, nullptr);
  for (const std::int64_t n : {1, 7, 16, 17, 40, 64, 100}) {
    SCOPED_TRACE("n " + std::to_string(n));
    const std::vector<float> even = mixed_values(n, 1 + static_cast<std::uint32_t>(n));
    const std::vector<float> odd = mixed_values(n, 1000 + static_cast<std::uint32_t>(n));
    std::vector<std::uint16_t> out(static_cast<size_t>(n) + 8, 0xabcd);
    run(even.data(), out.data(), n);
    for (std::int64_t i = 0; i < n; ++i) {
      EXPECT_TRUE(same_bf16(out[i], f32_to_bf16_bits(even[i]))) << "at " << i << ": " << even[i];
    }
    for (std::int64_t i = n; i < n + 8; ++i) EXPECT_EQ(out[i], 0xabcd);  // nothing past n
    std::vector<std::uint16_t> interleaved(static_cast<size_t>(2 * n) + 8, 0xabcd);
    for (const bool with_odd : {true, false}) {
      pairs(even.data(), with_odd ? odd.data() : nullptr, interleaved.data(), n);
      for (std::int64_t i = 0; i < n; ++i) {
        EXPECT_TRUE(same_bf16(interleaved[2 * i], f32_to_bf16_bits(even[i]))) << i;
        EXPECT_TRUE(same_bf16(interleaved[2 * i + 1], with_odd ? f32_to_bf16_bits(odd[i]) : 0))
            << i;
      }
      for (std::int64_t i = 2 * n; i < 2 * n + 8; ++i) EXPECT_EQ(interleaved[i], 0xabcd);
    }
  }
}

// exp(scale s - shift) rounded to bf16, and the sum of the f32 exps: against the same formula in
// double (the f32 exp, exp_for_bf16, is within 3.1e-6 relative), on a softmax row's arguments from
// 0 down to past the clamp, -inf (0) and NaN (NaN); and bit for bit the portable exp_for_bf16.
TEST(NativeBf16Rounding, SoftmaxRowMatchesTheExpAndItsSum) {
  if (!native_here()) return;
  const ExpRoundRow row = native_exp_round_row();
  const std::int64_t n = 256;
  std::vector<float> s(n);
  for (std::int64_t i = 0; i < n; ++i) s[i] = -0.37f * static_cast<float>(i);  // to -94
  s[5] = -std::numeric_limits<float>::infinity();
  const float scale = 0.125f, shift = -1.5f;
  std::vector<std::uint16_t> rounded(n);
  const float sum = row(s.data(), scale, shift, rounded.data(), n);
  double want_sum = 0.0;
  for (std::int64_t i = 0; i < n; ++i) {
    const float arg = scale * s[i] - shift;  // both rounded in f32, as the kernel does
    const double e = std::exp(static_cast<double>(arg));
    want_sum += e;
    const float got = bf16_bits_to_f32(rounded[i]);
    EXPECT_NEAR(got, e, e * (0x1p-8 + 3.2e-6) + 1e-38) << "at " << i;
  }
  EXPECT_NEAR(sum, want_sum, want_sum * 3.2e-6);
  std::vector<float> args(n), portable(n);
  for (std::int64_t i = 0; i < n; ++i) args[i] = scale * s[i] - shift;
  exp_for_bf16(args.data(), portable.data(), n);
  for (std::int64_t i = 0; i < n; ++i) {
    EXPECT_EQ(rounded[i], f32_to_bf16_bits(portable[i])) << "at " << i;
  }
  s[9] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(row(s.data(), scale, shift, rounded.data(), n)));
  EXPECT_TRUE(std::isnan(bf16_bits_to_f32(rounded[9])));
  // Highway's rounding takes over when asked, and the CPU's comes back.
  force_portable_rounding(true);
  EXPECT_EQ(native_exp_round_row(), nullptr);
  EXPECT_EQ(native_round_run(), nullptr);
  force_portable_rounding(false);
  EXPECT_NE(native_exp_round_row(), nullptr);
}

}  // namespace
}  // namespace qkv::kernels::cpu
