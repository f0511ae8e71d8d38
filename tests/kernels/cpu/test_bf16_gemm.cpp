// The bf16 matrix paths (kernels/cpu/bf16_gemm.hpp) against the f64 sum of the same bf16 products:
// every path this CPU runs, the emulated AMX tiles everywhere (the AMX kernel's tile logic and
// packing on any machine); the paths this CPU lacks are printed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/amx_emulated.hpp"
#include "kernels/cpu/bf16_gemm.hpp"
#include "kernels/cpu/bf16_pack.hpp"
#include "kernels/cpu/cpu_features.hpp"
#include "qkv/half.hpp"

namespace qkv::kernels::cpu {
namespace {

constexpr MatrixPath kPaths[] = {MatrixPath::amx_bf16, MatrixPath::avx512_bf16,
                                 MatrixPath::amx_emulated};

std::vector<MatrixPath> runnable_paths() {
  std::vector<MatrixPath> paths;
  std::string lacking;
  for (const MatrixPath p : kPaths) {
    if (path_available(p)) {
      paths.push_back(p);
    } else {
      lacking += std::string(lacking.empty() ? "" : ", ") + path_name(p);
    }
  }
  if (!lacking.empty()) std::printf("[ NOTE     ] this CPU lacks the paths: %s\n", lacking.c_str());
  return paths;
}

std::vector<float> bf16_values(std::int64_t n, std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = bf16_bits_to_f32(f32_to_bf16_bits(normal(gen)));
  return x;
}

struct Shape {
  std::int64_t M, N, K;  // the logical product; the tiles pad each up
};

// C [M, N] = A [M, K] B [K, N] on path, from f32 values that are exactly bf16, with B packed from
// its rows (transposed = false) or from the rows of B^T; with accumulate, C += A B from C's
// values (the padding's too: they come back unchanged plus zero products).
void check(MatrixPath path, Shape s, bool transposed, bool accumulate, std::uint32_t seed) {
  SCOPED_TRACE(std::string(path_name(path)) + " M " + std::to_string(s.M) + " N " +
               std::to_string(s.N) + " K " + std::to_string(s.K) +
               (transposed ? " (B from its transpose)" : "") + (accumulate ? " accumulating" : ""));
  const std::int64_t mt = (s.M + kUnitRows - 1) / kUnitRows;
  const std::int64_t nt = (s.N + kUnitCols - 1) / kUnitCols;
  const std::int64_t kc = (s.K + kUnitDepth - 1) / kUnitDepth;
  const std::int64_t rows = mt * kUnitRows, cols = nt * kUnitCols, depth = kc * kUnitDepth;
  const std::vector<float> a = bf16_values(s.M * s.K, seed);
  const std::vector<float> b = bf16_values(s.K * s.N, seed + 1);         // [K, N]
  std::vector<std::uint16_t> a16(static_cast<size_t>(rows * depth), 0);  // zero past M and K
  for (std::int64_t m = 0; m < s.M; ++m) {
    for (std::int64_t k = 0; k < s.K; ++k) a16[m * depth + k] = f32_to_bf16_bits(a[m * s.K + k]);
  }
  std::vector<std::uint16_t> b16(static_cast<size_t>(depth * cols));
  if (transposed) {
    std::vector<std::uint16_t> bt(static_cast<size_t>(s.N * s.K));  // [N, K]
    for (std::int64_t k = 0; k < s.K; ++k) {
      for (std::int64_t n = 0; n < s.N; ++n) bt[n * s.K + k] = f32_to_bf16_bits(b[k * s.N + n]);
    }
    pack_pairs_transposed(bt.data(), s.K, s.K, s.N, depth, cols, b16.data());
  } else {
    std::vector<std::uint16_t> bk(static_cast<size_t>(s.K * s.N));
    for (std::int64_t x = 0; x < s.K * s.N; ++x) bk[x] = f32_to_bf16_bits(b[x]);
    pack_pairs_rows(bk.data(), s.N, s.K, s.N, depth, cols, b16.data());
  }
  const std::int64_t ldc = cols + 3;  // a leading dimension wider than the tiles
  std::vector<float> c(static_cast<size_t>(rows * ldc), std::nanf(""));
  const std::vector<float> start = bf16_values(rows * cols, seed + 2);
  if (accumulate) {
    for (std::int64_t m = 0; m < rows; ++m) {
      std::copy_n(start.data() + m * cols, cols, c.data() + m * ldc);
    }
  }
  bf16_gemm(path, mt, nt, kc, a16.data(), depth, b16.data(), c.data(), ldc, accumulate);
  for (std::int64_t m = 0; m < rows; ++m) {
    for (std::int64_t n = 0; n < cols; ++n) {
      const double c0 = accumulate ? start[m * cols + n] : 0.0;
      double exact = c0, magnitude = std::abs(c0);
      if (m < s.M && n < s.N) {
        for (std::int64_t k = 0; k < s.K; ++k) {
          const double p = static_cast<double>(a[m * s.K + k]) * b[k * s.N + n];
          exact += p;
          magnitude += std::abs(p);
        }
      }
      // f32 rounding per step of two products, over K / 2 steps.
      const double bound = (static_cast<double>(s.K) / 2 + 2) * 0x1p-24 * magnitude;
      ASSERT_LE(std::abs(c[m * ldc + n] - exact), bound) << "at " << m << ", " << n;
    }
    for (std::int64_t n = cols; n < ldc; ++n) ASSERT_TRUE(std::isnan(c[m * ldc + n]));
  }
}

TEST(Bf16Gemm, EveryPathThisCpuRunsMatchesTheExactSum) {
  const Shape shapes[] = {{16, 16, 32},  {64, 64, 64}, {64, 64, 128}, {128, 128, 64},
                          {20, 40, 37},  {1, 80, 256}, {33, 112, 96}, {48, 16, 5},
                          {64, 256, 64}, {16, 48, 160}};
  std::uint32_t seed = 1;
  for (const MatrixPath path : runnable_paths()) {
    for (const Shape& s : shapes) {
      for (const bool accumulate : {false, true}) {
        check(path, s, false, accumulate, seed++);
        check(path, s, true, accumulate, seed++);
      }
    }
  }
}

// Inside a MatrixTileScope the AMX path configures its tiles once for all the calls of the
// thread: products of every shape, in turn, still come out right, and so do calls after it ends.
TEST(Bf16Gemm, CallsInsideATileScopeMatchTheExactSum) {
  const Shape shapes[] = {{128, 64, 64}, {20, 40, 37}, {64, 256, 64}, {1, 80, 256}};
  std::uint32_t seed = 100;
  for (const MatrixPath path : runnable_paths()) {
    {
      const MatrixTileScope scope;
      const MatrixTileScope nested;
      for (const Shape& s : shapes) {
        check(path, s, true, false, seed++);
        check(path, s, false, true, seed++);
      }
    }
    check(path, shapes[0], true, true, seed++);
  }
}

TEST(Bf16Gemm, EmulatedTilesFlushSubnormalsAndKeepNonFinite) {
  // One 16 x 16 product of depth 32: row 0 of A holds a subnormal product operand (read as 0),
  // row 1 an inf (inf in every column), row 2 a NaN (NaN in every column).
  std::vector<std::uint16_t> a(16 * 32, 0), b(16 * 16 * 2, 0);
  for (std::int64_t x = 0; x < 16 * 16 * 2; ++x) b[x] = f32_to_bf16_bits(1.0f);
  a[0] = 0x0001;  // the smallest bf16 subnormal
  a[32] = f32_to_bf16_bits(INFINITY);
  a[64] = f32_to_bf16_bits(NAN);
  a[96] = f32_to_bf16_bits(2.0f);
  std::vector<float> c(16 * 16, -1.0f);
  bf16_gemm(MatrixPath::amx_emulated, 1, 1, 1, a.data(), 32, b.data(), c.data(), 16, false);
  for (int n = 0; n < 16; ++n) {
    EXPECT_EQ(c[n], 0.0f);
    EXPECT_EQ(c[16 + n], INFINITY);
    EXPECT_TRUE(std::isnan(c[32 + n]));
    EXPECT_EQ(c[48 + n], 2.0f);
    EXPECT_EQ(c[64 + n], 0.0f);
  }
}

TEST(Bf16Gemm, EmulatedTilesRefuseABadConfiguration) {
  EmulatedAmx unit;
  TileConfig config = gemm_tile_config();
  config.rows[2] = 17;
  EXPECT_THROW(unit.load_config(config), Error);
  config = gemm_tile_config();
  config.palette_id = 0;
  EXPECT_THROW(unit.load_config(config), Error);
}

// K's and V's tiles packed in AVX-512 registers (pack_pairs_transposed_avx512,
// pack_pairs_rows_avx512) hold the portable copies' bits, padding included: every element of B
// written, whatever it held before, for dims and key counts that end inside a step of 32 elements
// and a block of 16 keys, odd ones among them; and V's answer of finiteness is the copies', with an
// infinity or a NaN inside the tile and beyond it (past its keys or its columns, which it ignores).
TEST(Bf16Pack, InRegistersMatchesTheCopies) {
  if (!avx512_packing()) {
    std::printf("[ NOTE     ] not run here (this CPU lacks it): avx512 packing\n");
    return;
  }
  std::mt19937 gen(11);
  std::uniform_int_distribution<int> bits(0, 0x7F7F);  // finite bf16 of either sign
  for (const std::int64_t dim : {1, 2, 31, 32, 33, 64, 100, 128, 130}) {
    for (const std::int64_t keys : {1, 15, 16, 17, 63, 64}) {
      SCOPED_TRACE("dim " + std::to_string(dim) + " keys " + std::to_string(keys));
      const std::int64_t lds = dim + 3, N = 64, depth = (dim + 31) / 32 * 32;
      std::vector<std::uint16_t> src(static_cast<size_t>((keys + 1) * lds));
      for (auto& x : src) x = static_cast<std::uint16_t>(bits(gen));
      std::vector<std::uint16_t> copies(static_cast<size_t>(depth * N), 0xABCD);
      std::vector<std::uint16_t> in_registers(copies.size(), 0x1234);
      pack_pairs_transposed_portable(src.data(), lds, dim, keys, depth, N, copies.data());
      pack_pairs_transposed_avx512(src.data(), lds, dim, keys, depth, N, in_registers.data());
      EXPECT_EQ(copies, in_registers);
      // V: keys rows of dim columns into [N keys / 2][dim rounded to 16][2].
      const std::int64_t cols = (dim + 15) / 16 * 16;
      for (const std::uint16_t special :
           {std::uint16_t{0}, std::uint16_t{0x7F80}, std::uint16_t{0xFFC1}}) {
        const std::int64_t last = (keys - 1) * lds + dim - 1;  // the tile's last value
        for (const std::int64_t at : {std::int64_t{0}, last, last + 1, keys * lds + dim - 1}) {
          std::vector<std::uint16_t> v = src;
          if (special != 0) v[static_cast<size_t>(at)] = special;
          std::vector<std::uint16_t> v_copies(static_cast<size_t>(N * cols), 0xABCD);
          std::vector<std::uint16_t> v_registers(v_copies.size(), 0x1234);
          const bool finite =
              pack_pairs_rows_portable(v.data(), lds, keys, dim, N, cols, v_copies.data());
          EXPECT_EQ(pack_pairs_rows_avx512(v.data(), lds, keys, dim, N, cols, v_registers.data()),
                    finite);
          EXPECT_EQ(finite, special == 0 || at > last) << "at " << at;
          EXPECT_EQ(v_copies, v_registers);
        }
      }
    }
  }
}

TEST(Bf16Gemm, TheFeaturesNamedAreTheOnesThePathsUse) {
  const CpuFeatures& f = cpu_features();
  std::string names;
  for (const std::string& n : f.names()) names += n + " ";
  std::printf("[ NOTE     ] usable here: %s\n", names.c_str());
  EXPECT_EQ(path_available(MatrixPath::avx512_bf16), f.avx512_bf16 && f.avx512bw);
  EXPECT_EQ(path_available(MatrixPath::amx_bf16), f.amx_usable && f.amx_bf16);
  EXPECT_TRUE(path_available(MatrixPath::amx_emulated));
  MatrixPath best;
  if (best_bf16_path(best)) {
    EXPECT_NE(best, MatrixPath::amx_emulated);
  }
}

}  // namespace
}  // namespace qkv::kernels::cpu
