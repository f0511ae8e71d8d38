// Philox4x32-10 (include/qkv/philox.hpp) against the published Random123 known answers, the
// dropout keying contract, and the statistics of the Generator's uniform and normal draws.

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <ostream>
#include <string>
#include <vector>

#include "qkv/philox.hpp"

namespace {

std::string words(const std::uint32_t* w, std::size_t n) {
  std::string s;
  for (std::size_t i = 0; i < n; ++i) {
    char buffer[16];
    std::snprintf(buffer, sizeof buffer, "%s%08x", i ? " " : "", static_cast<unsigned>(w[i]));
    s += buffer;
  }
  return s;
}

struct KnownAnswer {
  const char* name;
  qkv::PhiloxCounter counter;
  qkv::PhiloxKey key;
  qkv::PhiloxCounter expected;
};

void PrintTo(const KnownAnswer& k, std::ostream* os) {
  *os << k.name << ": counter " << words(k.counter.data(), 4) << ", key " << words(k.key.data(), 2)
      << " -> " << words(k.expected.data(), 4);
}

// The three "philox4x32 10" lines of Random123's tests/kat_vectors
// (https://github.com/DEShawResearch/random123, tests/kat_vectors; columns: counter, key,
// expected output):
//   philox4x32 10 00000000 00000000 00000000 00000000 00000000 00000000
//                 6627e8d5 e169c58d bc57ac4c 9b00dbd8
//   philox4x32 10 ffffffff ffffffff ffffffff ffffffff ffffffff ffffffff
//                 408f276d 41c83b0e a20bc7c6 6d5451fd
//   philox4x32 10 243f6a88 85a308d3 13198a2e 03707344 a4093822 299f31d0
//                 d16cfe09 94fdcceb 5001e420 24126ea1
const KnownAnswer kKnownAnswers[] = {
    {"zeros", {0, 0, 0, 0}, {0, 0}, {0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}},
    {"ones",
     {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
     {0xffffffffu, 0xffffffffu},
     {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}},
    {"pi_digits",
     {0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u},
     {0xa4093822u, 0x299f31d0u},
     {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}},
};

class PhiloxKnownAnswer : public testing::TestWithParam<KnownAnswer> {};

TEST_P(PhiloxKnownAnswer, MatchesRandom123) {
  const KnownAnswer& k = GetParam();
  const qkv::PhiloxCounter out = qkv::philox4x32_10(k.counter, k.key);
  EXPECT_EQ(words(out.data(), 4), words(k.expected.data(), 4));
}

INSTANTIATE_TEST_SUITE_P(Random123, PhiloxKnownAnswer, testing::ValuesIn(kKnownAnswers),
                         [](const testing::TestParamInfo<KnownAnswer>& info) {
                           return std::string(info.param.name);
                         });

// The generator is constexpr: the same known answer holds at compile time.
static_assert(qkv::philox4x32_10({0, 0, 0, 0}, {0, 0})[0] == 0x6627e8d5u);

TEST(Generator, SeedZeroDrawsTheZeroKnownAnswer) {
  // Seed 0 is key (0, 0) and the first block is counter 0: the "zeros" Random123 vector.
  qkv::Generator generator(0);
  const std::uint32_t expected[] = {0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u};
  for (const std::uint32_t e : expected) EXPECT_EQ(generator.next_u32(), e);
}

struct DropoutArgs {
  std::uint64_t seed;
  std::uint64_t offset;
  std::uint32_t bh;
  std::uint32_t i;
  std::uint32_t j;
};

std::string describe(const DropoutArgs& a) {
  char buffer[160];
  std::snprintf(buffer, sizeof buffer, "seed=%016llx offset=%016llx bh=%u i=%u j=%u",
                static_cast<unsigned long long>(a.seed), static_cast<unsigned long long>(a.offset),
                a.bh, a.i, a.j);
  return buffer;
}

// 64 consecutive columns from the given position, so one changed argument must change a whole
// run of draws, not a single word that could collide by chance.
std::vector<std::uint32_t> dropout_row(const DropoutArgs& a) {
  std::vector<std::uint32_t> row;
  for (std::uint32_t dj = 0; dj < 64; ++dj) {
    row.push_back(qkv::dropout_bits(a.seed, a.offset, a.bh, a.i, a.j + dj));
  }
  return row;
}

const DropoutArgs kBase = {0x0123456789abcdefull, 0x0000000500000007ull, 3, 17, 40};

TEST(Dropout, IsAPureFunctionOfItsArguments) {
  const std::vector<std::uint32_t> first = dropout_row(kBase);
  // Other draws in between must not disturb it: there is no hidden state.
  for (std::uint32_t k = 0; k < 1000; ++k) (void)qkv::dropout_bits(k, k, k, k, k);
  EXPECT_EQ(dropout_row(kBase), first);
}

TEST(Dropout, FollowsTheDocumentedKeyAndCounterLayout) {
  // key = (seed low, seed high ^ offset high), counter = (j / 4, i, bh, offset low), lane j % 4.
  const DropoutArgs a = kBase;
  for (std::uint32_t j = 0; j < 16; ++j) {
    const qkv::PhiloxKey key = {
        static_cast<std::uint32_t>(a.seed),
        static_cast<std::uint32_t>(a.seed >> 32) ^ static_cast<std::uint32_t>(a.offset >> 32)};
    const qkv::PhiloxCounter block =
        qkv::philox4x32_10({j / 4, a.i, a.bh, static_cast<std::uint32_t>(a.offset)}, key);
    EXPECT_EQ(qkv::dropout_bits(a.seed, a.offset, a.bh, a.i, j), block[j % 4]) << "j=" << j;
  }
}

TEST(Dropout, EveryArgumentChangesTheStream) {
  const std::vector<std::uint32_t> base = dropout_row(kBase);
  const std::vector<std::pair<const char*, DropoutArgs>> variants = {
      {"seed low bits", {kBase.seed ^ 1u, kBase.offset, kBase.bh, kBase.i, kBase.j}},
      {"seed high bits", {kBase.seed ^ (1ull << 40), kBase.offset, kBase.bh, kBase.i, kBase.j}},
      {"offset low bits", {kBase.seed, kBase.offset + 1, kBase.bh, kBase.i, kBase.j}},
      {"offset high bits", {kBase.seed, kBase.offset + (1ull << 32), kBase.bh, kBase.i, kBase.j}},
      {"bh", {kBase.seed, kBase.offset, kBase.bh + 1, kBase.i, kBase.j}},
      {"i", {kBase.seed, kBase.offset, kBase.bh, kBase.i + 1, kBase.j}},
      {"j", {kBase.seed, kBase.offset, kBase.bh, kBase.i, kBase.j + 64}},
  };
  for (const auto& [what, args] : variants) {
    SCOPED_TRACE(std::string("changed ") + what + ": " + describe(args));
    const std::vector<std::uint32_t> row = dropout_row(args);
    int equal = 0;
    for (std::size_t k = 0; k < row.size(); ++k) equal += row[k] == base[k];
    EXPECT_EQ(equal, 0);
  }
}

TEST(Dropout, KeepsAboutOneMinusPAndTheExtremes) {
  constexpr int kRows = 1000;
  constexpr int kCols = 1000;
  for (const double p : {0.0, 0.1, 0.5, 0.9, 1.0}) {
    SCOPED_TRACE("p=" + std::to_string(p));
    std::int64_t kept = 0;
    for (std::uint32_t i = 0; i < kRows; ++i) {
      for (std::uint32_t j = 0; j < kCols; ++j) kept += qkv::dropout_keep(42, 7, 5, i, j, p);
    }
    const double n = static_cast<double>(kRows) * kCols;
    if (p == 0.0) {
      EXPECT_EQ(kept, kRows * kCols);
    } else if (p == 1.0) {
      EXPECT_EQ(kept, 0);
    } else {
      // Binomial standard error of the kept fraction; 5 sigma.
      const double sigma = std::sqrt(p * (1 - p) / n);
      EXPECT_NEAR(static_cast<double>(kept) / n, 1 - p, 5 * sigma);
    }
  }
}

TEST(UniformFromBits, MapsTheTop24BitsIntoZeroOne) {
  EXPECT_EQ(qkv::uniform_from_bits(0), 0.0f);
  EXPECT_EQ(qkv::uniform_from_bits(0xffu), 0.0f);  // the low 8 bits are dropped
  EXPECT_EQ(qkv::uniform_from_bits(0x100u), 0x1p-24f);
  EXPECT_EQ(qkv::uniform_from_bits(0x80000000u), 0.5f);
  EXPECT_EQ(qkv::uniform_from_bits(0xffffffffu), 1.0f - 0x1p-24f);
  EXPECT_LT(qkv::uniform_from_bits(0xffffffffu), 1.0f);
  // Every 24-bit value is exact and the map is strictly increasing.
  float previous = -1.0f;
  for (std::uint32_t top = 0; top < (1u << 24); ++top) {
    const float u = qkv::uniform_from_bits(top << 8 | (top & 0xffu));
    if (!(u > previous && u < 1.0f && u == std::ldexp(static_cast<double>(top), -24))) {
      FAIL() << "top bits " << top << " give " << u;
    }
    previous = u;
  }
}

TEST(Generator, IsDeterministicPerSeedAndSeedsDiffer) {
  for (const std::uint64_t seed : {0ull, 1ull, 0xdeadbeefcafef00dull}) {
    SCOPED_TRACE("seed=" + std::to_string(seed));
    qkv::Generator a(seed);
    qkv::Generator b(seed);
    qkv::Generator other(seed + 1);
    qkv::Generator high(seed ^ (1ull << 63));
    int same_as_other = 0;
    int same_as_high = 0;
    for (int k = 0; k < 1000; ++k) {
      const std::uint32_t x = a.next_u32();
      ASSERT_EQ(x, b.next_u32()) << "draw " << k;
      same_as_other += x == other.next_u32();
      same_as_high += x == high.next_u32();
    }
    EXPECT_EQ(same_as_other, 0);
    EXPECT_EQ(same_as_high, 0);
  }
}

TEST(Generator, CopyContinuesTheSameStream) {
  qkv::Generator a(99);
  for (int k = 0; k < 7; ++k) (void)a.next_u32();  // mid-block, to copy the lane state too
  qkv::Generator b = a;
  for (int k = 0; k < 100; ++k) ASSERT_EQ(a.next_u32(), b.next_u32()) << "draw " << k;
  qkv::Generator c = a;
  for (int k = 0; k < 100; ++k) ASSERT_EQ(a.next_normal(), c.next_normal()) << "draw " << k;
}

TEST(Generator, UniformMomentsMatchU01) {
  constexpr int kDraws = 1000000;
  qkv::Generator generator(2024);
  double sum = 0;
  double sum_sq = 0;
  int fine_bits = 0;
  for (int k = 0; k < kDraws; ++k) {
    const double u = generator.next_uniform();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    // 53 random bits: some draws must use bits below 2^-32, which 32-bit draws never do.
    fine_bits += std::fmod(std::ldexp(u, 32), 1.0) != 0.0;
    sum += u;
    sum_sq += (u - 0.5) * (u - 0.5);
  }
  const double mean = sum / kDraws;
  const double variance = sum_sq / kDraws;
  // U(0,1): mean 1/2 with variance 1/12; (U - 1/2)^2 has mean 1/12 and variance
  // 1/80 - 1/144 = 1/180. Tolerances are 5 standard errors.
  EXPECT_NEAR(mean, 0.5, 5 * std::sqrt(1.0 / 12 / kDraws));
  EXPECT_NEAR(variance, 1.0 / 12, 5 * std::sqrt(1.0 / 180 / kDraws));
  EXPECT_GT(fine_bits, kDraws / 2);
}

TEST(Generator, NormalMomentsMatchStandardNormal) {
  constexpr int kDraws = 1000000;
  qkv::Generator generator(7);
  double sum = 0;
  double sum_sq = 0;
  double sum_4 = 0;
  int within_one = 0;
  int within_two = 0;
  for (int k = 0; k < kDraws; ++k) {
    const double z = generator.next_normal();
    ASSERT_TRUE(std::isfinite(z)) << "draw " << k;
    sum += z;
    sum_sq += z * z;
    sum_4 += z * z * z * z;
    within_one += std::fabs(z) < 1;
    within_two += std::fabs(z) < 2;
  }
  // N(0,1): E z = 0 (sd 1), E z^2 = 1 (Var z^2 = 2), E z^4 = 3 (Var z^4 = 105 - 9 = 96),
  // P(|z| < 1) = erf(1/sqrt 2), P(|z| < 2) = erf(sqrt 2). Tolerances are 5 standard errors.
  const double n = kDraws;
  EXPECT_NEAR(sum / n, 0.0, 5 / std::sqrt(n));
  EXPECT_NEAR(sum_sq / n, 1.0, 5 * std::sqrt(2 / n));
  EXPECT_NEAR(sum_4 / n, 3.0, 5 * std::sqrt(96 / n));
  const double p1 = std::erf(1 / std::sqrt(2.0));
  const double p2 = std::erf(std::sqrt(2.0));
  EXPECT_NEAR(p1, 0.6826894921, 1e-9);
  EXPECT_NEAR(within_one / n, p1, 5 * std::sqrt(p1 * (1 - p1) / n));
  EXPECT_NEAR(within_two / n, p2, 5 * std::sqrt(p2 * (1 - p2) / n));
}

}  // namespace
