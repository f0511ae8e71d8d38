// The tiled matrix products (kernels/cpu/tiled_gemm.hpp) on every SIMD target this CPU runs:
// each transpose, accumulate or not (or a bias to start every row from), leading dimensions wider
// than the rows, shapes that leave row, column and depth tails and cross the blocks of rows and of
// K. Against the product written out in long double; where the target fuses its multiply-adds
// (AVX2, AVX-512), bitwise against the chain of std::fma over k in order that the header promises;
// and bitwise the same on 1, 2 and 3 threads.
#include <gtest/gtest.h>
#include <hwy/targets.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "kernels/cpu/tiled_gemm.hpp"
#include "qkv/philox.hpp"

namespace qkv::testing {
namespace {

struct Case {
  std::int64_t M, N, K;
};

// The shapes: tails of every register tile and strip width, a block of rows (128) and of K (512)
// crossed, N short of one strip; and products that run as their transpose (B transposed, one
// thread, M at most a strip, N at least 2M) with sides in whole 8 x 8 blocks, whose packing and
// final transpose then take the blocked path (pack-inl.h), besides 3 x 100 x 17 and 13 x 33 x 7
// with edges.
const Case kCases[] = {{1, 1, 1},      {5, 3, 2},      {13, 33, 7}, {37, 29, 41}, {3, 100, 17},
                       {129, 17, 513}, {64, 134, 128}, {15, 16, 0}, {16, 40, 24}, {32, 72, 16}};

template <class T>
void check_products() {
  Generator g(11);
  int targets = 0;
  for (const std::int64_t target : hwy::SupportedAndGeneratedTargets()) {
    const std::string name = hwy::TargetName(target);
    SCOPED_TRACE(name);
    hwy::SetSupportedTargetsForTest(target);
    const bool fused = name.find("AVX") != std::string::npos;
    ++targets;
    for (const Case s : kCases) {
      for (const bool ta : {false, true}) {
        for (const bool tb : {false, true}) {
          for (const int start : {0, 1, 2}) {  // from 0, from C, from the bias
            const bool accumulate = start == 1;
            SCOPED_TRACE(std::to_string(s.M) + "x" + std::to_string(s.N) + "x" +
                         std::to_string(s.K) + " ta " + std::to_string(ta) + " tb " +
                         std::to_string(tb) + " start " + std::to_string(start));
            // Stored with 3 spare elements a row: A [M, K] (or [K, M]), B [K, N] (or [N, K]).
            const std::int64_t lda = (ta ? s.M : s.K) + 3, ldb = (tb ? s.K : s.N) + 3,
                               ldc = s.N + 3;
            std::vector<T> a((ta ? s.K : s.M) * lda), b((tb ? s.N : s.K) * ldb), c0(s.M * ldc);
            for (T& x : a) x = static_cast<T>(g.next_normal());
            for (T& x : b) x = static_cast<T>(g.next_normal());
            for (T& x : c0) x = static_cast<T>(g.next_normal());
            std::vector<T> bias(s.N);
            for (T& x : bias) x = static_cast<T>(g.next_normal());
            const auto A = [&](std::int64_t m, std::int64_t k) {
              return ta ? a[k * lda + m] : a[m * lda + k];
            };
            const auto B = [&](std::int64_t k, std::int64_t n) {
              return tb ? b[n * ldb + k] : b[k * ldb + n];
            };
            std::vector<T> first;
            for (const int threads : {1, 2, 3}) {
              std::vector<T> c = c0;
              kernels::cpu::tiled_gemm(ta, tb, s.M, s.N, s.K, a.data(), lda, b.data(), ldb,
                                       accumulate, c.data(), ldc, threads,
                                       start == 2 ? bias.data() : nullptr);
              if (!first.empty()) {
                EXPECT_EQ(c, first) << threads << " threads";
                continue;
              }
              first = c;
              for (std::int64_t m = 0; m < s.M; ++m) {
                for (std::int64_t n = 0; n < s.N + 3; ++n) {
                  const T got = c[m * ldc + n];
                  if (n >= s.N) {  // past the row: untouched
                    ASSERT_EQ(got, c0[m * ldc + n]) << m << ", " << n;
                    continue;
                  }
                  const T from = start == 1 ? c0[m * ldc + n] : start == 2 ? bias[n] : T(0);
                  long double want = from, size = std::fabs(want);
                  T chain = from;
                  for (std::int64_t k = 0; k < s.K; ++k) {
                    want += static_cast<long double>(A(m, k)) * B(k, n);
                    size += std::fabs(static_cast<long double>(A(m, k)) * B(k, n));
                    chain = std::fma(A(m, k), B(k, n), chain);
                  }
                  const long double eps = std::numeric_limits<T>::epsilon();
                  ASSERT_LE(std::fabs(got - want), (s.K + 1) * eps * size) << m << ", " << n;
                  if (fused) {
                    ASSERT_EQ(got, chain) << m << ", " << n;
                  }
                }
              }
            }
          }
        }
      }
    }
  }
  hwy::SetSupportedTargetsForTest(0);
  EXPECT_GT(targets, 0);
}

TEST(TiledGemm, F32ProductsOnEveryTarget) { check_products<float>(); }
TEST(TiledGemm, F64ProductsOnEveryTarget) { check_products<double>(); }

}  // namespace
}  // namespace qkv::testing
