// bf16 and f16 conversion (include/qkv/half.hpp): hand-worked bit patterns, exhaustive round
// trips, and sweeps against two independent roundings (the CPU's F16C instruction and a
// double-arithmetic rounding), plus single rounding of f64 through Tensor.

#include <gtest/gtest.h>
#include <immintrin.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include "core/reference_rounding.hpp"
#include "qkv/dtype.hpp"
#include "qkv/half.hpp"
#include "qkv/tensor.hpp"

namespace {

using qkv::test::kBf16Format;
using qkv::test::kF16Format;
using qkv::test::round_to_format;

float from_bits(std::uint32_t bits) { return std::bit_cast<float>(bits); }
std::uint32_t to_bits(float x) { return std::bit_cast<std::uint32_t>(x); }

std::string hex(std::uint64_t bits, int digits) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "0x%0*llx", digits, static_cast<unsigned long long>(bits));
  return buffer;
}

bool is_f16_nan(std::uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0; }
bool is_bf16_nan(std::uint16_t h) { return (h & 0x7f80u) == 0x7f80u && (h & 0x7fu) != 0; }

// The value of an f16 bit pattern from the IEEE definition, in double arithmetic.
double decode_f16(std::uint16_t h) {
  const int exponent = (h >> 10) & 0x1f;
  const int mantissa = h & 0x3ff;
  const double sign = (h & 0x8000u) ? -1.0 : 1.0;
  if (exponent == 0x1f) {
    return mantissa == 0 ? sign * std::numeric_limits<double>::infinity()
                         : std::numeric_limits<double>::quiet_NaN();
  }
  if (exponent == 0) return sign * std::ldexp(mantissa, -24);
  return sign * std::ldexp(1024 + mantissa, exponent - 25);
}

// The value of a bf16 bit pattern from its definition (8 exponent bits, 7 mantissa bits).
double decode_bf16(std::uint16_t h) {
  const int exponent = (h >> 7) & 0xff;
  const int mantissa = h & 0x7f;
  const double sign = (h & 0x8000u) ? -1.0 : 1.0;
  if (exponent == 0xff) {
    return mantissa == 0 ? sign * std::numeric_limits<double>::infinity()
                         : std::numeric_limits<double>::quiet_NaN();
  }
  if (exponent == 0) return sign * std::ldexp(mantissa, -133);
  return sign * std::ldexp(128 + mantissa, exponent - 134);
}

struct BitsCase {
  const char* name;
  float input;
  std::uint16_t expected;
};

void PrintTo(const BitsCase& c, std::ostream* os) {
  *os << c.name << ": " << hex(to_bits(c.input), 8) << " (" << std::hexfloat << c.input
      << std::defaultfloat << ") -> " << hex(c.expected, 4);
}

std::string case_name(const testing::TestParamInfo<BitsCase>& info) { return info.param.name; }

// Worked by hand from the format definitions: f16 has 10 fraction bits, exponent bias 15,
// smallest normal 2^-14, smallest subnormal 2^-24, largest finite 65504 = (2 - 2^-10) * 2^15,
// and values from 65520 = 65504 + half an ulp upward round to infinity.
const BitsCase kF16Cases[] = {
    {"one", 1.0f, 0x3c00},
    {"minus_two", -2.0f, 0xc000},
    {"pi", 3.14159265f, 0x4248},
    {"one_tenth", 0.1f, 0x2e66},
    {"one_third", 1.0f / 3.0f, 0x3555},
    {"zero", 0.0f, 0x0000},
    {"minus_zero", -0.0f, 0x8000},
    {"inf", std::numeric_limits<float>::infinity(), 0x7c00},
    {"minus_inf", -std::numeric_limits<float>::infinity(), 0xfc00},
    {"max_finite", 65504.0f, 0x7bff},
    {"below_overflow_65519_99", 65519.99f, 0x7bff},
    {"just_below_overflow", 0x1.ffdfep15f, 0x7bff},
    {"overflow_65520", 65520.0f, 0x7c00},
    {"minus_overflow_65520", -65520.0f, 0xfc00},
    {"flt_max", std::numeric_limits<float>::max(), 0x7c00},
    {"smallest_normal", 0x1p-14f, 0x0400},
    {"largest_subnormal", 1023 * 0x1p-24f, 0x03ff},
    {"subnormal_tie_to_normal", 0x1p-14f - 0x1p-25f, 0x0400},
    {"smallest_subnormal", 0x1p-24f, 0x0001},
    {"half_smallest_subnormal_tie_to_zero", 0x1p-25f, 0x0000},
    {"minus_half_smallest_subnormal", -0x1p-25f, 0x8000},
    {"just_above_half_smallest_subnormal", 0x1.000002p-25f, 0x0001},
    {"three_quarters_smallest_subnormal", 1.5f * 0x1p-25f, 0x0001},
    {"three_halves_smallest_subnormal_tie", 3 * 0x1p-25f, 0x0002},
    {"five_halves_smallest_subnormal_tie", 5 * 0x1p-25f, 0x0002},
    {"seven_halves_smallest_subnormal_tie", 7 * 0x1p-25f, 0x0004},
    {"tiny", 1e-30f, 0x0000},
    {"smallest_f32_subnormal", 0x1p-149f, 0x0000},
    {"one_plus_half_ulp_tie", 1.0f + 0x1p-11f, 0x3c00},
    {"one_plus_three_half_ulps_tie", 1.0f + 3 * 0x1p-11f, 0x3c02},
    {"one_plus_just_over_half_ulp", 1.0f + 0x1p-11f + 0x1p-23f, 0x3c01},
    {"one_plus_just_under_half_ulp", 1.0f + 0x1p-11f - 0x1p-23f, 0x3c00},
    {"integer_2049_tie", 2049.0f, 0x6800},
    {"integer_2051_tie", 2051.0f, 0x6802},
    {"carry_into_exponent", 0x1.ffep0f, 0x4000},
    {"minus_carry_into_exponent", -0x1.ffep0f, 0xc000},
};

class F16Bits : public testing::TestWithParam<BitsCase> {};

TEST_P(F16Bits, RoundsToNearestEven) {
  const BitsCase& c = GetParam();
  EXPECT_EQ(hex(qkv::f32_to_f16_bits(c.input), 4), hex(c.expected, 4));
  EXPECT_EQ(hex(qkv::f16(c.input).bits, 4), hex(c.expected, 4));
}

INSTANTIATE_TEST_SUITE_P(Known, F16Bits, testing::ValuesIn(kF16Cases), case_name);

// bf16 keeps 7 fraction bits of binary32 and its whole exponent range: the largest finite value
// is (2 - 2^-7) * 2^127 and (2 - 2^-8) * 2^127 (half an ulp above) already rounds to infinity.
const BitsCase kBf16Cases[] = {
    {"one", 1.0f, 0x3f80},
    {"minus_two", -2.0f, 0xc000},
    {"pi", 3.14159265f, 0x4049},
    {"one_tenth", 0.1f, 0x3dcd},
    {"one_third", 1.0f / 3.0f, 0x3eab},
    {"zero", 0.0f, 0x0000},
    {"minus_zero", -0.0f, 0x8000},
    {"inf", std::numeric_limits<float>::infinity(), 0x7f80},
    {"minus_inf", -std::numeric_limits<float>::infinity(), 0xff80},
    {"one_plus_half_ulp_tie", 1.0f + 0x1p-8f, 0x3f80},
    {"one_plus_three_half_ulps_tie", 1.0f + 3 * 0x1p-8f, 0x3f82},
    {"one_plus_just_over_half_ulp", 1.0f + 0x1p-8f + 0x1p-23f, 0x3f81},
    {"one_plus_just_under_half_ulp", 1.0f + 0x1p-8f - 0x1p-23f, 0x3f80},
    {"carry_into_exponent", 0x1.ffp0f, 0x4000},
    {"max_finite", 0x1.fep127f, 0x7f7f},
    {"just_below_overflow_tie", from_bits(0x7f7f7fffu), 0x7f7f},
    {"overflow_tie_to_inf", 0x1.ffp127f, 0x7f80},
    {"flt_max", std::numeric_limits<float>::max(), 0x7f80},
    {"minus_flt_max", -std::numeric_limits<float>::max(), 0xff80},
    {"smallest_normal", 0x1p-126f, 0x0080},
    {"subnormal_tie_to_zero", from_bits(0x00008000u), 0x0000},
    {"subnormal_just_above_tie", from_bits(0x00008001u), 0x0001},
    {"subnormal_tie_to_two", from_bits(0x00018000u), 0x0002},
    {"smallest_f32_subnormal", 0x1p-149f, 0x0000},
    {"minus_smallest_f32_subnormal", -0x1p-149f, 0x8000},
};

class Bf16Bits : public testing::TestWithParam<BitsCase> {};

TEST_P(Bf16Bits, RoundsToNearestEven) {
  const BitsCase& c = GetParam();
  EXPECT_EQ(hex(qkv::f32_to_bf16_bits(c.input), 4), hex(c.expected, 4));
  EXPECT_EQ(hex(qkv::bf16(c.input).bits, 4), hex(c.expected, 4));
}

INSTANTIATE_TEST_SUITE_P(Known, Bf16Bits, testing::ValuesIn(kBf16Cases), case_name);

// Signaling NaNs whose payload sits only in the low bits would become infinity under plain
// truncation; the sign must survive.
const std::uint32_t kNanInputs[] = {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff800001u,
                                    0x7fffffffu, 0x7fa00000u, 0x7f802000u};

TEST(HalfNan, F16StaysNanWithItsSign) {
  for (const std::uint32_t bits : kNanInputs) {
    SCOPED_TRACE(hex(bits, 8));
    const std::uint16_t h = qkv::f32_to_f16_bits(from_bits(bits));
    EXPECT_TRUE(is_f16_nan(h)) << hex(h, 4);
    EXPECT_EQ(h >> 15, bits >> 31);
  }
}

TEST(HalfNan, Bf16StaysNanWithItsSign) {
  for (const std::uint32_t bits : kNanInputs) {
    SCOPED_TRACE(hex(bits, 8));
    const std::uint16_t h = qkv::f32_to_bf16_bits(from_bits(bits));
    EXPECT_TRUE(is_bf16_nan(h)) << hex(h, 4);
    EXPECT_EQ(h >> 15, bits >> 31);
  }
}

// Every one of the 65536 patterns: decoding agrees with the IEEE definition and encoding the
// decoded float gives the pattern back (a NaN gives a NaN).
TEST(HalfExhaustive, F16DecodesAndRoundTrips) {
  int failures = 0;
  for (std::uint32_t bits = 0; bits <= 0xffffu && failures < 10; ++bits) {
    const auto h = static_cast<std::uint16_t>(bits);
    const float value = qkv::f16_bits_to_f32(h);
    const std::uint16_t back = qkv::f32_to_f16_bits(value);
    const double expected = decode_f16(h);
    if (is_f16_nan(h)) {
      if (!std::isnan(value) || !is_f16_nan(back)) {
        ADD_FAILURE() << hex(h, 4) << " is a NaN but decodes to " << value << " and returns as "
                      << hex(back, 4);
        ++failures;
      }
      continue;
    }
    if (static_cast<double>(value) != expected || std::signbit(value) != ((h & 0x8000u) != 0) ||
        back != h) {
      ADD_FAILURE() << hex(h, 4) << " decodes to " << std::hexfloat << value << " (expected "
                    << expected << ") and returns as " << hex(back, 4);
      ++failures;
    }
  }
  EXPECT_EQ(failures, 0);
}

TEST(HalfExhaustive, Bf16DecodesAndRoundTrips) {
  int failures = 0;
  for (std::uint32_t bits = 0; bits <= 0xffffu && failures < 10; ++bits) {
    const auto h = static_cast<std::uint16_t>(bits);
    const float value = qkv::bf16_bits_to_f32(h);
    const std::uint16_t back = qkv::f32_to_bf16_bits(value);
    const double expected = decode_bf16(h);
    if (is_bf16_nan(h)) {
      if (!std::isnan(value) || !is_bf16_nan(back)) {
        ADD_FAILURE() << hex(h, 4) << " is a NaN but decodes to " << value << " and returns as "
                      << hex(back, 4);
        ++failures;
      }
      continue;
    }
    if (static_cast<double>(value) != expected || std::signbit(value) != ((h & 0x8000u) != 0) ||
        back != h) {
      ADD_FAILURE() << hex(h, 4) << " decodes to " << std::hexfloat << value << " (expected "
                    << expected << ") and returns as " << hex(back, 4);
      ++failures;
    }
  }
  EXPECT_EQ(failures, 0);
}

// Float patterns where rounding to a 16-bit format can go wrong: every stride-th pattern of the
// whole 2^32 (a stride coprime to 2^16 visits every low-bit residue), +-2 patterns around the
// midpoint between each pair of adjacent positive values of the format (the ties), and dense
// windows around the given boundaries, with both signs.
std::vector<std::uint32_t> sweep_patterns(std::uint32_t stride,
                                          const std::vector<double>& midpoints,
                                          const std::vector<std::uint32_t>& boundaries) {
  std::vector<std::uint32_t> patterns;
  for (std::uint64_t bits = 0; bits <= 0xffffffffu; bits += stride) {
    patterns.push_back(static_cast<std::uint32_t>(bits));
  }
  for (const double midpoint : midpoints) {
    const std::uint32_t center = to_bits(static_cast<float>(midpoint));
    for (std::uint32_t bits = center - 2; bits != center + 3; ++bits) {
      patterns.push_back(bits);
      patterns.push_back(bits | 0x80000000u);
    }
  }
  for (const std::uint32_t center : boundaries) {
    for (std::uint32_t bits = center - 0x10000u; bits != center + 0x10000u; ++bits) {
      patterns.push_back(bits);
      patterns.push_back(bits | 0x80000000u);
    }
  }
  return patterns;
}

std::vector<double> f16_midpoints() {
  std::vector<double> midpoints;
  for (std::uint16_t h = 0; h < 0x7bff; ++h) {
    midpoints.push_back((decode_f16(h) + decode_f16(h + 1)) / 2);
  }
  midpoints.push_back(65520.0);
  return midpoints;
}

// 2^-25 (ties to zero), 2^-24 (smallest subnormal), 2^-14 (smallest normal), 65520 (overflow).
const std::vector<std::uint32_t> kF16Boundaries = {0x33000000u, 0x33800000u, 0x38800000u,
                                                   0x477ff000u};

__attribute__((target("f16c"))) std::uint16_t f16c_round(float x) {
  return static_cast<std::uint16_t>(_cvtss_sh(x, _MM_FROUND_TO_NEAREST_INT));
}

TEST(HalfSweep, F16MatchesF16cInstruction) {
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("f16c")) GTEST_SKIP() << "this CPU has no F16C";
  const std::vector<std::uint32_t> patterns = sweep_patterns(97, f16_midpoints(), kF16Boundaries);
  std::int64_t mismatches = 0;
  for (const std::uint32_t bits : patterns) {
    const float x = from_bits(bits);
    const std::uint16_t ours = qkv::f32_to_f16_bits(x);
    const std::uint16_t hardware = f16c_round(x);
    if (ours != hardware && mismatches++ < 10) {
      ADD_FAILURE() << hex(bits, 8) << " (" << std::hexfloat << x << "): qkv " << hex(ours, 4)
                    << ", F16C " << hex(hardware, 4);
    }
  }
  EXPECT_EQ(mismatches, 0) << "over " << patterns.size() << " patterns";
}

// Compares one encoder against round_to_format over the patterns; NaNs must stay NaNs.
template <class Encode, class Decode, class IsNan>
void expect_matches_reference(const std::vector<std::uint32_t>& patterns, Encode encode,
                              Decode decode, IsNan is_nan, const qkv::test::BinaryFormat& format) {
  std::int64_t mismatches = 0;
  for (const std::uint32_t bits : patterns) {
    const float x = from_bits(bits);
    const std::uint16_t ours = encode(x);
    if (std::isnan(x)) {
      if (!is_nan(ours) && mismatches++ < 10) {
        ADD_FAILURE() << hex(bits, 8) << " is a NaN but encodes to " << hex(ours, 4);
      }
      continue;
    }
    const double expected = round_to_format(x, format);
    const double got = decode(ours);
    if ((got != expected || std::signbit(got) != std::signbit(expected)) && mismatches++ < 10) {
      ADD_FAILURE() << hex(bits, 8) << " (" << std::hexfloat << x << "): qkv " << hex(ours, 4)
                    << " = " << got << ", reference " << expected;
    }
  }
  EXPECT_EQ(mismatches, 0) << "over " << patterns.size() << " patterns";
}

TEST(HalfSweep, F16MatchesDoubleReference) {
  expect_matches_reference(sweep_patterns(997, f16_midpoints(), kF16Boundaries),
                           qkv::f32_to_f16_bits, decode_f16, is_f16_nan, kF16Format);
}

TEST(HalfSweep, Bf16MatchesDoubleReference) {
  std::vector<double> midpoints;
  for (std::uint16_t h = 0; h < 0x7f7f; ++h) {
    midpoints.push_back((decode_bf16(h) + decode_bf16(h + 1)) / 2);
  }
  midpoints.push_back(0x1.ffp127);
  // The smallest normal and the overflow tie.
  const std::vector<std::uint32_t> boundaries = {0x00800000u, 0x7f7f8000u};
  expect_matches_reference(sweep_patterns(257, midpoints, boundaries), qkv::f32_to_bf16_bits,
                           decode_bf16, is_bf16_nan, kBf16Format);
}

// f64 -> bf16/f16 in Tensor must round once. Each value below sits on the other side of a tie
// from what rounding to f32 first would produce, so double rounding gives the wrong bits.
struct DoubleCase {
  const char* name;
  double input;
  qkv::DType dtype;
  std::uint16_t expected;
};

void PrintTo(const DoubleCase& c, std::ostream* os) {
  *os << c.name << ": " << std::hexfloat << c.input << std::defaultfloat << " as "
      << qkv::dtype_name(c.dtype) << " -> " << hex(c.expected, 4);
}

const DoubleCase kDoubleCases[] = {
    // Via f32, 1 + 2^-11 + 2^-30 becomes exactly 1 + 2^-11, an f16 tie that goes down.
    {"f16_above_tie_by_2e_minus30", 1.0 + 0x1p-11 + 0x1p-30, qkv::DType::f16, 0x3c01},
    {"f16_minus_above_tie", -(1.0 + 0x1p-11 + 0x1p-30), qkv::DType::f16, 0xbc01},
    {"f16_exact_tie", 1.0 + 0x1p-11, qkv::DType::f16, 0x3c00},
    {"f16_below_tie", 1.0 + 0x1p-11 - 0x1p-30, qkv::DType::f16, 0x3c00},
    // Via f32 this is the tie 1 + 3 * 2^-11, which goes up to the even 0x3c02.
    {"f16_below_odd_tie", 1.0 + 3 * 0x1p-11 - 0x1p-30, qkv::DType::f16, 0x3c01},
    {"f16_subnormal_above_tie", 0x1p-25 + 0x1p-60, qkv::DType::f16, 0x0001},
    // Via f32 this is 65520, which overflows.
    {"f16_below_overflow", 65520.0 - 0x1p-30, qkv::DType::f16, 0x7bff},
    {"f16_overflow", 65520.0, qkv::DType::f16, 0x7c00},
    {"f16_beyond_f32_range", 1e300, qkv::DType::f16, 0x7c00},
    {"f16_minus_beyond_f32_range", -1e300, qkv::DType::f16, 0xfc00},
    {"f16_below_f32_range", 1e-300, qkv::DType::f16, 0x0000},
    {"f16_minus_below_f32_range", -1e-300, qkv::DType::f16, 0x8000},
    {"bf16_above_tie_by_2e_minus30", 1.0 + 0x1p-8 + 0x1p-30, qkv::DType::bf16, 0x3f81},
    {"bf16_below_odd_tie", 1.0 + 3 * 0x1p-8 - 0x1p-30, qkv::DType::bf16, 0x3f81},
    {"bf16_exact_tie", 1.0 + 0x1p-8, qkv::DType::bf16, 0x3f80},
    // Via f32 this is 2^-134 exactly (f32 subnormals stop at 2^-149), a bf16 tie to zero.
    {"bf16_subnormal_above_tie", 0x1p-134 + 0x1p-170, qkv::DType::bf16, 0x0001},
    // Via f32 this is the overflow tie (2 - 2^-8) * 2^127, which goes to infinity.
    {"bf16_below_overflow", 0x1.ffp127 - 0x1p90, qkv::DType::bf16, 0x7f7f},
    {"bf16_beyond_f32_range", 1e300, qkv::DType::bf16, 0x7f80},
    {"bf16_minus_below_f32_range", -1e-300, qkv::DType::bf16, 0x8000},
};

std::uint16_t stored_bits(const qkv::Tensor& t) {
  return t.dtype() == qkv::DType::f16 ? t.data_as<qkv::f16>()->bits : t.data_as<qkv::bf16>()->bits;
}

class TensorFromDouble : public testing::TestWithParam<DoubleCase> {};

TEST_P(TensorFromDouble, RoundsOnce) {
  const DoubleCase& c = GetParam();
  const std::uint16_t expected = c.expected;
  EXPECT_EQ(hex(stored_bits(qkv::Tensor::from_values({1}, {c.input}, c.dtype)), 4),
            hex(expected, 4));
  EXPECT_EQ(hex(stored_bits(qkv::Tensor::full({1}, c.input, c.dtype)), 4), hex(expected, 4));
  qkv::Tensor t = qkv::Tensor::zeros({1}, c.dtype);
  t.set({0}, c.input);
  EXPECT_EQ(hex(stored_bits(t), 4), hex(expected, 4));
  const qkv::Tensor converted =
      qkv::Tensor::from_values({1}, {c.input}, qkv::DType::f64).to(c.dtype);
  EXPECT_EQ(hex(stored_bits(converted), 4), hex(expected, 4));
}

std::string double_case_name(const testing::TestParamInfo<DoubleCase>& info) {
  return info.param.name;
}

INSTANTIATE_TEST_SUITE_P(Known, TensorFromDouble, testing::ValuesIn(kDoubleCases),
                         double_case_name);

TEST(TensorFromDouble, NanStaysNan) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_TRUE(is_f16_nan(stored_bits(qkv::Tensor::from_values({1}, {nan}, qkv::DType::f16))));
  EXPECT_TRUE(is_bf16_nan(stored_bits(qkv::Tensor::from_values({1}, {nan}, qkv::DType::bf16))));
}

// Doubles a hair (2^-40 and 2^-26 relative) either side of every tie of the format, through
// Tensor, against round_to_format applied to the double directly.
void expect_tensor_rounds_like_reference(qkv::DType dtype, std::uint16_t last_finite,
                                         double (*decode)(std::uint16_t),
                                         const qkv::test::BinaryFormat& format) {
  std::vector<double> values;
  for (std::uint16_t h = 0; h < last_finite; ++h) {
    const double midpoint = (decode(h) + decode(h + 1)) / 2;
    for (const double relative : {0.0, 0x1p-40, -0x1p-40, 0x1p-26, -0x1p-26}) {
      values.push_back(midpoint * (1 + relative));
      values.push_back(-midpoint * (1 + relative));
    }
  }
  const qkv::Tensor t =
      qkv::Tensor::from_values({static_cast<std::int64_t>(values.size())}, values, dtype);
  const auto* stored = static_cast<const std::uint16_t*>(t.data());
  int mismatches = 0;
  for (std::size_t i = 0; i < values.size(); ++i) {
    const double expected = round_to_format(values[i], format);
    const double got = decode(stored[i]);
    if ((got != expected || std::signbit(got) != std::signbit(expected)) && mismatches++ < 10) {
      ADD_FAILURE() << std::hexfloat << values[i] << ": qkv " << hex(stored[i], 4) << " = " << got
                    << ", reference " << expected;
    }
  }
  EXPECT_EQ(mismatches, 0) << "over " << values.size() << " values";
}

TEST(TensorFromDouble, F16NearEveryTieMatchesReference) {
  expect_tensor_rounds_like_reference(qkv::DType::f16, 0x7bff, decode_f16, kF16Format);
}

TEST(TensorFromDouble, Bf16NearEveryTieMatchesReference) {
  expect_tensor_rounds_like_reference(qkv::DType::bf16, 0x7f7f, decode_bf16, kBf16Format);
}

}  // namespace
