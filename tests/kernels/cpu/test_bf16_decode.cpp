// Decode shapes of bf16 q, k and v whose k/v heads have 3 query rows or more take their scores
// from bf16 dot products (kernels/cpu/bf16_dots.hpp), in the forward and in the backward's
// recomputation, and their full tiles' P V from bf16 products (P rounded to bf16), on every path
// this CPU runs and on the emulated dots everywhere:
// - the dots themselves: a score's bits whatever the rows and keys around it in a call (the
//   forward and the backward call them in other groupings), within f32 rounding of the exact sum,
//   the lanes summed in the tree's order bit for bit, subnormal inputs read as zero; and the
//   values' products with P rounded to bf16, within f32 rounding of theirs, a non-finite value in
//   its own column only;
// - attention: within FlashAttention's rule of the f64 reference (out 2x, dq, dk, dv 3x the error
//   of the reference computed from the same bf16 inputs), peaked rows included, whose dv leaves
//   that bound unless the backward recomputes the forward's scores bit for bit;
//   deterministic over thread counts; really taken (other bits than the f32 dots'), and not taken
//   below 3 rows a k/v head, nor by the key-by-key step of large [B, T, H, D] caches.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/bf16_dots.hpp"
#include "kernels/cpu/bf16_gemm.hpp"
#include "kernels/cpu/bf16_runs.hpp"
#include "kernels/cpu/fused_case.hpp"
#include "kernels/cpu/fused_pass.hpp"
#include "qkv/half.hpp"
#include "qkv/qkv.hpp"

namespace qkv::testing {
namespace {

using kernels::cpu::bf16_score_dots;
using kernels::cpu::ForcedFusedPath;
using kernels::cpu::kBf16DotKeys;
using kernels::cpu::kBf16DotRows;
using kernels::cpu::MatrixPath;

std::uint16_t bf16_of(float x) {
  return static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(x) >> 16);
}
float value_of(std::uint16_t bits) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
}

// kBf16DotRows query rows and kBf16DotKeys keys of dim bf16 values (keys ldk = dim + 3 apart),
// normal values times 4, with -0, infinities, a NaN and a subnormal where `specials`.
struct DotInputs {
  std::int64_t dim, ldk;
  std::vector<std::uint16_t> q, k;
  DotInputs(std::int64_t dim_, bool specials, std::uint32_t seed) : dim(dim_), ldk(dim_ + 3) {
    std::mt19937 g(seed);
    std::normal_distribution<float> normal(0.0f, 4.0f);
    q.resize(static_cast<size_t>(kBf16DotRows * dim));
    k.resize(static_cast<size_t>(kBf16DotKeys * ldk));
    for (auto& x : q) x = bf16_of(normal(g));
    for (auto& x : k) x = bf16_of(normal(g));
    if (specials) {
      q[0] = bf16_of(-0.0f);
      q[static_cast<size_t>(dim)] = bf16_of(INFINITY);           // row 1
      k[static_cast<size_t>(2 * ldk)] = bf16_of(-INFINITY);      // key 2
      k[static_cast<size_t>(3 * ldk + dim - 1)] = bf16_of(NAN);  // key 3
      q[static_cast<size_t>(2 * dim + dim / 2)] = 0x0001;        // row 2: subnormal
    }
  }
  const std::uint16_t* row(std::int64_t r) const { return q.data() + r * dim; }
};

// The scores of rows [r0, r0 + rows) against keys [c0, c0 + n) in one call.
void dots(MatrixPath path, const DotInputs& in, std::int64_t r0, std::int64_t rows, std::int64_t c0,
          std::int64_t n, float scale, std::vector<float>& out) {
  const std::uint16_t* q[kBf16DotRows];
  float* s[kBf16DotRows];
  for (std::int64_t r = 0; r < rows; ++r) {
    q[r] = in.row(r0 + r);
    s[r] = out.data() + (r0 + r) * kBf16DotKeys + c0;
  }
  bf16_score_dots(path, q, rows, in.k.data() + c0 * in.ldk, in.ldk, n, in.dim, scale, s);
}

std::vector<MatrixPath> dot_paths() {
  std::vector<MatrixPath> out = {MatrixPath::amx_emulated};
  if (kernels::cpu::path_available(MatrixPath::avx512_bf16)) {
    out.push_back(MatrixPath::avx512_bf16);
  } else {
    std::printf("[ NOTE     ] not run here (this CPU lacks it): avx512-bf16 dot products\n");
  }
  return out;
}

const std::vector<std::int64_t> kDims = {1, 16, 31, 32, 33, 64, 100, 128, 130, 256};

TEST(Bf16Dots, EachScoresBitsWhateverTheCallAroundIt) {
  for (const MatrixPath path : dot_paths()) {
    for (const std::int64_t dim : kDims) {
      SCOPED_TRACE(std::string(kernels::cpu::path_name(path)) + " dim " + std::to_string(dim));
      const DotInputs in(dim, true, static_cast<std::uint32_t>(dim));
      const size_t all = static_cast<size_t>(kBf16DotRows * kBf16DotKeys);
      std::vector<float> whole(all), alone(all), pieces(all), others(all);
      dots(path, in, 0, kBf16DotRows, 0, kBf16DotKeys, 0.125f, whole);
      for (std::int64_t r = 0; r < kBf16DotRows; ++r) {
        for (std::int64_t c = 0; c < kBf16DotKeys; ++c) dots(path, in, r, 1, c, 1, 0.125f, alone);
      }
      // Rows 3 + 13 and keys 5 + 7 + 4 + 29 + 19: every tail of the loops, runs below and above
      // the AVX-512 path's tree, and rows below and above its lanes (kBf16LaneRows); then rows 5 +
      // 11 (its 8 and 16 lanes) and keys 33 + 31.
      for (const auto& [r0, rows] : {std::pair{0, 3}, std::pair{3, 13}}) {
        for (const auto& [c0, n] : {std::pair{0, 5}, std::pair{5, 7}, std::pair{12, 4},
                                    std::pair{16, 29}, std::pair{45, 19}}) {
          dots(path, in, r0, rows, c0, n, 0.125f, pieces);
        }
      }
      for (const auto& [r0, rows] : {std::pair{0, 5}, std::pair{5, 11}}) {
        for (const auto& [c0, n] : {std::pair{0, 33}, std::pair{33, 31}}) {
          dots(path, in, r0, rows, c0, n, 0.125f, others);
        }
      }
      static_assert(kBf16DotRows == 16 && kBf16DotKeys == 64, "the pieces cover every score");
      EXPECT_EQ(std::memcmp(whole.data(), alone.data(), all * sizeof(float)), 0);
      EXPECT_EQ(std::memcmp(whole.data(), pieces.data(), all * sizeof(float)), 0);
      EXPECT_EQ(std::memcmp(whole.data(), others.data(), all * sizeof(float)), 0);
      // The specials' rows: NaN from the NaN key and from inf against -inf or +-0 products.
      EXPECT_TRUE(std::isnan(whole[static_cast<size_t>(0 * kBf16DotKeys + 3)]));
      EXPECT_TRUE(std::isinf(whole[static_cast<size_t>(1 * kBf16DotKeys + 0)]) ||
                  std::isnan(whole[static_cast<size_t>(1 * kBf16DotKeys + 0)]));
    }
  }
}

TEST(Bf16Dots, WithinF32RoundingOfTheExactSum) {
  for (const MatrixPath path : dot_paths()) {
    for (const std::int64_t dim : kDims) {
      SCOPED_TRACE(std::string(kernels::cpu::path_name(path)) + " dim " + std::to_string(dim));
      const DotInputs in(dim, false, 100 + static_cast<std::uint32_t>(dim));
      std::vector<float> got(static_cast<size_t>(kBf16DotRows * kBf16DotKeys));
      const float scale = 0.0883883f;  // about 1 / sqrt(128), not a power of two
      dots(path, in, 0, kBf16DotRows, 0, kBf16DotKeys, scale, got);
      for (std::int64_t r = 0; r < kBf16DotRows; ++r) {
        for (std::int64_t c = 0; c < kBf16DotKeys; ++c) {
          double exact = 0, magnitude = 0;
          for (std::int64_t x = 0; x < dim; ++x) {
            const double p =
                static_cast<double>(value_of(in.row(r)[x])) *
                static_cast<double>(value_of(in.k[static_cast<size_t>(c * in.ldk + x)]));
            exact += p;
            magnitude += std::fabs(p);
          }
          // One rounding per product added, per level of the lanes' tree, and the scale's.
          const double bound =
              (static_cast<double>(dim) + 6) * std::ldexp(1.0, -24) * magnitude * scale;
          EXPECT_LE(std::fabs(got[static_cast<size_t>(r * kBf16DotKeys + c)] - exact * scale),
                    bound)
              << "row " << r << " key " << c;
        }
      }
    }
  }
}

// Each key's 16 lanes set exactly (lane l: q's element 2l is 1 and 2l + 1 is 0, k's element 2l the
// lane's value), spread over 40 binades so that most orders of adding them round apart: the score
// is the lanes summed in bf16_dots.hpp's tree, bit for bit, on every path, for 1 row (the AVX-512
// path's vector tree, lane by lane sums in calls of 3 keys) and for 8 and 16 rows (its rows in
// lanes), in calls of 64, 16 and 3 keys. Summed left to right instead, the same lanes round apart
// from the tree in 23 of the 64 keys.
TEST(Bf16Dots, LanesSummedInTheTreesOrder) {
  constexpr std::int64_t dim = 32;
  std::mt19937 g(7);
  std::uniform_real_distribution<float> mantissa(-1.0f, 1.0f);
  std::uniform_int_distribution<int> binade(-20, 20);
  std::vector<std::uint16_t> q(dim, 0), k(static_cast<size_t>(kBf16DotKeys * dim), 0);
  std::vector<float> tree(kBf16DotKeys), in_order(kBf16DotKeys);
  for (std::int64_t l = 0; l < 16; ++l) q[static_cast<size_t>(2 * l)] = bf16_of(1.0f);
  for (std::int64_t c = 0; c < kBf16DotKeys; ++c) {
    float lanes[16];
    for (std::int64_t l = 0; l < 16; ++l) {
      const std::uint16_t x = bf16_of(std::ldexp(mantissa(g), binade(g)));
      k[static_cast<size_t>(c * dim + 2 * l)] = x;
      lanes[l] = value_of(x);
    }
    in_order[static_cast<size_t>(c)] = 0;
    for (const float lane : lanes) in_order[static_cast<size_t>(c)] += lane;
    for (int width = 8; width >= 1; width /= 2) {
      for (int i = 0; i < width; ++i) lanes[i] = lanes[i] + lanes[i + width];
    }
    tree[static_cast<size_t>(c)] = lanes[0];
  }
  std::int64_t orders_apart = 0;
  for (std::int64_t c = 0; c < kBf16DotKeys; ++c) {
    orders_apart += std::bit_cast<std::uint32_t>(tree[static_cast<size_t>(c)]) !=
                    std::bit_cast<std::uint32_t>(in_order[static_cast<size_t>(c)]);
  }
  EXPECT_GE(orders_apart, 16);
  const std::uint16_t* rows[kBf16DotRows];
  std::fill(rows, rows + kBf16DotRows, q.data());
  for (const MatrixPath path : dot_paths()) {
    for (const std::int64_t m : {std::int64_t{1}, std::int64_t{8}, kBf16DotRows}) {
      for (const std::int64_t n : {kBf16DotKeys, std::int64_t{16}, std::int64_t{3}}) {
        SCOPED_TRACE(std::string(kernels::cpu::path_name(path)) + " rows " + std::to_string(m) +
                     " keys a call " + std::to_string(n));
        std::vector<float> got(static_cast<size_t>(m * kBf16DotKeys));
        for (std::int64_t c0 = 0; c0 < kBf16DotKeys; c0 += n) {
          float* s[kBf16DotRows];
          for (std::int64_t r = 0; r < m; ++r) s[r] = got.data() + r * kBf16DotKeys + c0;
          bf16_score_dots(path, rows, m, k.data() + c0 * dim, dim, std::min(n, kBf16DotKeys - c0),
                          dim, 1.0f, s);
        }
        for (std::int64_t r = 0; r < m; ++r) {
          for (std::int64_t c = 0; c < kBf16DotKeys; ++c) {
            const float score = got[static_cast<size_t>(r * kBf16DotKeys + c)];
            EXPECT_EQ(std::bit_cast<std::uint32_t>(score),
                      std::bit_cast<std::uint32_t>(tree[static_cast<size_t>(c)]))
                << "row " << r << " key " << c << ": " << score << " against "
                << tree[static_cast<size_t>(c)];
          }
        }
      }
    }
  }
}

TEST(Bf16Dots, SubnormalInputsReadAsZero) {
  // A subnormal bf16 (2^-133) times 2^100: 2^-33, a normal product; VDPBF16PS reads the input as 0.
  const std::uint16_t q[2] = {0x0001, 0};
  const std::uint16_t k[2] = {bf16_of(std::ldexp(1.0f, 100)), 0};
  const std::uint16_t* rows[1] = {q};
  for (const MatrixPath path : dot_paths()) {
    SCOPED_TRACE(kernels::cpu::path_name(path));
    float s = -1;
    float* out[1] = {&s};
    bf16_score_dots(path, rows, 1, k, 2, 1, 2, 1.0f, out);
    EXPECT_EQ(s, 0.0f);
  }
}

TEST(Bf16Dots, ValuesWithinF32RoundingOfTheWeightsRoundedToBf16) {
  for (const MatrixPath path : dot_paths()) {
    for (const std::int64_t dv : {1, 15, 16, 40, 128, 130}) {
      for (const std::int64_t n : {1, 2, 7, 64}) {
        SCOPED_TRACE(std::string(kernels::cpu::path_name(path)) + " dv " + std::to_string(dv) +
                     " keys " + std::to_string(n));
        std::mt19937 g(static_cast<std::uint32_t>(dv * 100 + n));
        std::uniform_real_distribution<float> weight(0.0f, 1.0f);
        std::normal_distribution<float> normal(0.0f, 2.0f);
        const std::int64_t ldv = dv + 5;
        // Key n (past the keys) holds NaN: it must not be read.
        std::vector<std::uint16_t> v(static_cast<size_t>((n + 1) * ldv), bf16_of(NAN));
        for (std::int64_t c = 0; c < n; ++c) {
          for (std::int64_t x = 0; x < dv; ++x)
            v[static_cast<size_t>(c * ldv + x)] = bf16_of(normal(g));
        }
        std::vector<float> p(static_cast<size_t>(kBf16DotRows * n));
        for (auto& x : p) x = weight(g);
        // One column past dv in every row of acc: must stay as it is.
        std::vector<float> acc(static_cast<size_t>(kBf16DotRows * (dv + 1)));
        for (auto& x : acc) x = normal(g);
        const std::vector<float> start = acc;
        const float* pr[kBf16DotRows];
        float* ar[kBf16DotRows];
        for (std::int64_t r = 0; r < kBf16DotRows; ++r) {
          pr[r] = p.data() + r * n;
          ar[r] = acc.data() + r * (dv + 1);
        }
        kernels::cpu::bf16_values(path, pr, kBf16DotRows, v.data(), ldv, n, dv, ar);
        for (std::int64_t r = 0; r < kBf16DotRows; ++r) {
          EXPECT_EQ(ar[r][dv], start[static_cast<size_t>(r * (dv + 1) + dv)]);
          for (std::int64_t x = 0; x < dv; ++x) {
            double exact = start[static_cast<size_t>(r * (dv + 1) + x)];
            double magnitude = std::fabs(exact);
            for (std::int64_t c = 0; c < n; ++c) {
              const double term =
                  static_cast<double>(value_of(f32_to_bf16_bits(pr[r][c]))) *
                  static_cast<double>(value_of(v[static_cast<size_t>(c * ldv + x)]));
              exact += term;
              magnitude += std::fabs(term);
            }
            // One rounding per product added.
            const double bound = static_cast<double>(n + 1) * std::ldexp(1.0, -24) * magnitude;
            EXPECT_LE(std::fabs(ar[r][x] - exact), bound) << "row " << r << " column " << x;
          }
        }
      }
    }
  }
}

// A value's NaN or infinity reaches its column only; an infinity times a weight of 0 is NaN.
TEST(Bf16Dots, ValuesNonFiniteStaysInItsColumn) {
  const std::int64_t dv = 48, n = 5;
  std::vector<std::uint16_t> v(static_cast<size_t>(n * dv), bf16_of(1.0f));
  v[static_cast<size_t>(1 * dv + 3)] = bf16_of(NAN);
  v[static_cast<size_t>(4 * dv + 20)] = bf16_of(INFINITY);
  v[static_cast<size_t>(2 * dv + 40)] = bf16_of(INFINITY);
  const float p[n] = {0.5f, 0.25f, 0.0f, 0.125f, 0.5f};
  for (const MatrixPath path : dot_paths()) {
    SCOPED_TRACE(kernels::cpu::path_name(path));
    std::vector<float> acc(static_cast<size_t>(dv), 0.0f);
    const float* pr[1] = {p};
    float* ar[1] = {acc.data()};
    kernels::cpu::bf16_values(path, pr, 1, v.data(), dv, n, dv, ar);
    for (std::int64_t x = 0; x < dv; ++x) {
      SCOPED_TRACE(x);
      if (x == 3 || x == 40) {
        EXPECT_TRUE(std::isnan(acc[static_cast<size_t>(x)]));
      } else if (x == 20) {
        EXPECT_EQ(acc[static_cast<size_t>(x)], INFINITY);
      } else {
        EXPECT_EQ(acc[static_cast<size_t>(x)], 1.375f);
      }
    }
  }
}

std::vector<FusedCase> shapes() {
  std::vector<FusedCase> out;
  FusedCase gqa;  // 8 rows a k/v head, key lengths, bottom-right causal
  gqa.B = 2;
  gqa.Tq = 1;
  gqa.Tk = 2000;
  gqa.Hq = 16;
  gqa.Hk = 2;
  gqa.D = gqa.Dv = 128;
  gqa.causal = Causal::bottom_right;
  gqa.padding = true;
  out.push_back(gqa);
  FusedCase mqa;  // 16 rows, D past whole steps, a window, soft-capping, ALiBi
  mqa.Tq = 2;
  mqa.Tk = 1500;
  mqa.Hq = 8;
  mqa.Hk = 1;
  mqa.D = 100;
  mqa.Dv = 72;
  mqa.window = {600, 0};
  mqa.softcap = 20.0;
  mqa.alibi = true;
  out.push_back(mqa);
  FusedCase queries;  // 16 queries of one head each, heads-first views, a keep-mask, a bias
  queries.B = 2;
  queries.Tq = 16;
  queries.Tk = 700;
  queries.Hq = queries.Hk = 3;
  queries.D = queries.Dv = 64;
  queries.mask = queries.strided = queries.bias = true;
  out.push_back(queries);
  FusedCase peaked;  // scores ~1e7, an ulp of 1 in f32: P = exp(s - lse) leaves [0, 1] unless the
                     // backward's scores are the forward's bits; 4 rows a k/v head
  peaked.Tq = 2;
  peaked.Tk = 1100;
  peaked.Hq = 4;
  peaked.Hk = 2;
  peaked.D = peaked.Dv = 128;
  peaked.q_scale = 1e6;
  out.push_back(peaked);
  FusedCase three;  // 3 rows a k/v head (two, then one, in the values' blocks), D past whole
                    // vectors of 32, key lengths
  three.Tq = 1;
  three.Tk = 900;
  three.Hq = 6;
  three.Hk = 2;
  three.D = three.Dv = 96;
  three.padding = true;
  out.push_back(three);
  FusedCase chunk;  // 20 queries against a long cache (TileTraits::kDecodeLongQueries): 40 rows
                    // a k/v head, in lanes (16 + 16) and the tree (8), bottom-right causal
  chunk.Tq = 20;
  chunk.Tk = 4100;
  chunk.Hq = 4;
  chunk.Hk = 2;
  chunk.D = chunk.Dv = 64;
  chunk.causal = Causal::bottom_right;
  out.push_back(chunk);
  FusedCase peaked_chunk = chunk;  // peaked as above: the backward's scores are the decode's
  peaked_chunk.causal = Causal::none;
  peaked_chunk.Hq = 2;
  peaked_chunk.Hk = 1;
  peaked_chunk.q_scale = 1e6;
  out.push_back(peaked_chunk);
  FusedCase wide;  // D 256 (rows loaded, not held), dropout
  wide.Tq = 8;
  wide.Tk = 300;
  wide.Hq = wide.Hk = 2;
  wide.D = 256;
  wide.Dv = 32;
  wide.dropout = 0.1;
  out.push_back(wide);
  return out;
}

std::vector<std::vector<double>> results_of(const Pass& r) {
  return {r.fwd.out.to_vector(), r.fwd.lse.to_vector(), r.grads.dq.to_vector(),
          r.grads.dk.to_vector(), r.grads.dv.to_vector()};
}

class Bf16Decode : public ::testing::TestWithParam<FusedCase> {};

TEST_P(Bf16Decode, WithinFlashAttentionsRuleOnEveryPath) {
  const FusedInputs in = make_inputs(GetParam(), DType::bf16);
  AttentionOptions cpu = in.options, ref = in.options, ref64 = in.options;
  cpu.backend = Backend::cpu;
  ref.backend = ref64.backend = Backend::reference;
  if (ref64.bias.defined()) ref64.bias = ref64.bias.to(DType::f64);
  FusedInputs in64 = in;
  for (Tensor* t : {&in64.q, &in64.k, &in64.v, &in64.dout}) *t = t->to(DType::f64);
  const Pass exact = run(in64, ref64);
  const Pass low = run(in, ref);
  const Pass f32 = run_forced(std::nullopt, in, cpu);
  for (const MatrixPath path : bf16_paths()) {
    SCOPED_TRACE(kernels::cpu::path_name(path));
    const ForcedFusedPath forced(path);
    const Pass got = run(in, cpu);
    const double slack = 1e-6 * std::max(1.0, max_abs(exact.fwd.out));
    EXPECT_LE(max_error(got.fwd.out, exact.fwd.out),
              2 * max_error(low.fwd.out, exact.fwd.out) + slack);
    EXPECT_LE(max_error(got.fwd.lse, exact.fwd.lse),
              2 * max_error(low.fwd.lse, exact.fwd.lse) + 1e-5);
    const std::vector<std::pair<const char*, const Tensor AttentionGrads::*>> grads = {
        {"dq", &AttentionGrads::dq}, {"dk", &AttentionGrads::dk}, {"dv", &AttentionGrads::dv}};
    for (const auto& [name, member] : grads) {
      // Peaked rows' dq and dk are rounding noise times the huge q (docs/numerics.md); their dv
      // is P^T dO, with P one-hot only where the backward's scores are the forward's bits.
      if (GetParam().q_scale > 1e3 && member != &AttentionGrads::dv) continue;
      SCOPED_TRACE(name);
      const Tensor& want = exact.grads.*member;
      EXPECT_LE(max_error(got.grads.*member, want),
                3 * max_error(low.grads.*member, want) + 1e-6 * std::max(1.0, max_abs(want)));
    }
    // Other bits than the f32 path's (the dots' scores, full tiles' P rounded to bf16): the path
    // was taken. Not the lse alone: over 900 keys at D 96 it kept every bit of the f32 path's
    // for 3 rows of 6.
    EXPECT_FALSE(bitwise_equal({got.fwd.out.to_vector(), got.fwd.lse.to_vector()},
                               {f32.fwd.out.to_vector(), f32.fwd.lse.to_vector()}));
    // The same bits on one thread as on two.
    const Pass one = run_on_one_thread(in, cpu);
    EXPECT_TRUE(bitwise_equal(results_of(got), results_of(one)));
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, Bf16Decode, ::testing::ValuesIn(shapes()),
                         [](const ::testing::TestParamInfo<FusedCase>& info) {
                           return info.param.name();
                         });

// K and V in [B, T, H, D] past the decode forward's key-by-key threshold (20M elements), 4 rows a
// k/v head, peaked rows: the forward's tiles take the bf16 dots, not the key-by-key step's f32
// dots, or the backward's P (dv) leaves the bound. On the CPU's path, or the emulated one.
TEST(Bf16Decode, LargeCachePeakedRowsTakeTheDotsTheBackwardTakes) {
  FusedCase c;
  c.Tq = 1;
  c.Tk = 10300;  // K and V 21.1M elements
  c.Hq = 32;
  c.Hk = 8;
  c.D = c.Dv = 128;
  c.q_scale = 1e6;
  const FusedInputs in = make_inputs(c, DType::bf16);
  AttentionOptions cpu = in.options, ref = in.options;
  cpu.backend = Backend::cpu;
  ref.backend = Backend::reference;
  FusedInputs in64 = in;
  for (Tensor* t : {&in64.q, &in64.k, &in64.v, &in64.dout}) *t = t->to(DType::f64);
  const Pass exact = run(in64, ref);
  const MatrixPath path = dot_paths().back();
  SCOPED_TRACE(kernels::cpu::path_name(path));
  const Pass got = run_forced(path, in, cpu);
  // Each row's P one-hot: dv is dout's rows, rounded to bf16 once (2^-9 relative); a score
  // summed otherwise in the backward gives P = e^(a few ulps of 1e7) instead of 1.
  EXPECT_LE(max_error(got.grads.dv, exact.grads.dv), std::ldexp(1.0, -8) * max_abs(exact.grads.dv));
}

// Peaked rows (scores ~1e7) with 4 rows a k/v head, as a caller may hand them: the backward's
// scores are the forward's bits, so dv is dout's rows rounded to bf16 once (P one-hot); summed
// otherwise, P = e^(a few ulps of 1e7). Also with a q whose last dimension is strided: the
// forward reads its f32 copy and takes no dots, so neither may the backward.
TEST(Bf16Decode, PeakedRowsTheBackwardScoresAsTheForwardDid) {
  FusedCase c;
  c.Tq = 1;
  c.Tk = 1100;
  c.Hq = 8;
  c.Hk = 2;
  c.D = c.Dv = 128;
  c.q_scale = 1e6;
  const FusedInputs base = make_inputs(c, DType::bf16);
  FusedInputs strided_q = base;  // every other element of a [B, Tq, Hq, 2 D] tensor
  Tensor wide = Tensor::zeros({c.B, c.Tq, c.Hq, 2 * c.D}, DType::bf16);
  wide.slice(3, 0, 2 * c.D, 2).copy_from(base.q);
  strided_q.q = wide.slice(3, 0, 2 * c.D, 2);
  ASSERT_EQ(strided_q.q.stride(3), 2);
  const std::vector<std::pair<const char*, const FusedInputs*>> cases = {{"contiguous", &base},
                                                                         {"strided q", &strided_q}};
  for (const auto& [name, in] : cases) {
    SCOPED_TRACE(name);
    AttentionOptions cpu = in->options, ref = in->options;
    cpu.backend = Backend::cpu;
    ref.backend = Backend::reference;
    FusedInputs in64 = *in;
    for (Tensor* t : {&in64.q, &in64.k, &in64.v, &in64.dout}) *t = t->to(DType::f64);
    const Pass exact = run(in64, ref);
    for (const MatrixPath path : dot_paths()) {
      SCOPED_TRACE(kernels::cpu::path_name(path));
      const Pass got = run_forced(path, *in, cpu);
      EXPECT_LE(max_error(got.grads.dv, exact.grads.dv),
                std::ldexp(1.0, -8) * max_abs(exact.grads.dv));
    }
  }
}

// Two rows a k/v head (Hq 8 over Hk 4): the f32 dot products whatever the path forced.
TEST(Bf16Decode, FewerThanThreeRowsAHeadKeepTheF32Dots) {
  FusedCase c;
  c.Tq = 1;
  c.Tk = 1500;
  c.Hq = 8;
  c.Hk = 4;
  c.D = c.Dv = 128;
  const FusedInputs in = make_inputs(c, DType::bf16);
  AttentionOptions cpu = in.options;
  cpu.backend = Backend::cpu;
  const Pass forced_run = run_forced(MatrixPath::amx_emulated, in, cpu);
  const Pass f32 = run_forced(std::nullopt, in, cpu);
  EXPECT_TRUE(bitwise_equal(results_of(forced_run), results_of(f32)));
}

}  // namespace
}  // namespace qkv::testing
