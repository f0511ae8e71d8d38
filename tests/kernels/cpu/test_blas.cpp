// The matrix products through BLIS: the kernels qkv asks BLIS for follow the rule of
// kernels/cpu/blas.cpp on this CPU, and the products (each transpose, accumulate, K = 0) equal
// the f64 product written out.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "kernels/cpu/blas.hpp"
#include "kernels/cpu/cpu_features.hpp"
#include "qkv/philox.hpp"
#include "qkv/system.hpp"

namespace qkv::testing {
namespace {

TEST(Blas, KernelsAskedForFollowTheCpu) {
  const kernels::cpu::CpuFeatures& f = kernels::cpu::cpu_features();
  const std::string& chosen = kernels::cpu::blas_kernels_chosen();
  std::cout << "[ blas ] \"" << f.brand << "\", family " << f.family << (f.amd ? " (AMD)" : "")
            << ": " << blas_kernels() << "\n";
  const bool unknown =
      (f.amd && f.family > 25) || (f.intel && kernels::cpu::brand_names_no_model(f.brand));
  if (!unknown) {
    EXPECT_EQ(chosen, "");
  }
  if (chosen.empty()) return;
  const bool skx = f.avx512f && f.avx512cd && f.avx512dq && f.avx512bw && f.avx512vl;
  EXPECT_EQ(chosen, skx ? "skx" : "haswell");
  const char* set = std::getenv("BLIS_ARCH_TYPE");
  ASSERT_NE(set, nullptr);
  EXPECT_EQ(std::string(set), skx ? "0" : "3");  // BLIS 0.9's ids of skx and haswell
}

TEST(Blas, BrandsThatNameNoModelAreTold) {
  EXPECT_TRUE(kernels::cpu::brand_names_no_model("Intel(R) Xeon(R) Processor"));
  EXPECT_TRUE(kernels::cpu::brand_names_no_model("Intel(R) Xeon(R) Processor @ 2.10GHz"));
  EXPECT_FALSE(kernels::cpu::brand_names_no_model("Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz"));
  EXPECT_FALSE(kernels::cpu::brand_names_no_model("Intel(R) Xeon(R) Platinum 8480+"));
  EXPECT_FALSE(kernels::cpu::brand_names_no_model(""));
}

// Products big enough to be cut among threads give bitwise the same C on 1, 2, 3 and 5 threads,
// whichever way this CPU's kernels cut them (pieces per thread where BLIS's kernels are
// split-invariant, column splits or shape-fixed row pieces elsewhere).
TEST(Blas, ProductsDoNotDependOnTheThreadCount) {
  Generator g(7);
  const int saved = num_threads();
  struct Shape3 {
    std::int64_t M, N, K;
  };
  for (const Shape3 s : {Shape3{64, 384, 128},
                         {64, 134, 128},
                         {448, 128, 512},
                         {512, 128, 480},
                         {130, 517, 61},
                         {700, 33, 300}}) {
    for (const bool ta : {false, true}) {
      for (const bool tb : {false, true}) {
        std::vector<float> a(s.M * s.K), b(s.K * s.N);
        for (float& x : a) x = static_cast<float>(g.next_normal());
        for (float& x : b) x = static_cast<float>(g.next_normal());
        std::vector<float> first;
        for (const int threads : {1, 2, 3, 5}) {
          set_num_threads(threads);
          std::vector<float> c(s.M * s.N);
          kernels::cpu::blas_gemm(ta, tb, s.M, s.N, s.K, a.data(), ta ? s.M : s.K, b.data(),
                                  tb ? s.K : s.N, false, c.data(), s.N);
          if (first.empty()) {
            first = c;
          } else {
            EXPECT_EQ(c, first) << s.M << "x" << s.N << "x" << s.K << " ta " << ta << " tb " << tb
                                << ", " << threads << " threads";
          }
        }
      }
    }
  }
  set_num_threads(saved);
}

TEST(Blas, ProductsEqualTheProductWrittenOut) {
  Generator g(3);
  const std::int64_t M = 37, N = 29, K = 41;
  std::vector<double> a(M * K), b(K * N), c0(M * N);
  for (double& x : a) x = g.next_normal();
  for (double& x : b) x = g.next_normal();
  for (double& x : c0) x = g.next_normal();
  for (const bool ta : {false, true}) {
    for (const bool tb : {false, true}) {
      for (const bool accumulate : {false, true}) {
        // Stored as op(A) asks: A [M, K] or its transpose [K, M], likewise B.
        std::vector<double> as(M * K), bs(K * N);
        for (std::int64_t m = 0; m < M; ++m) {
          for (std::int64_t k = 0; k < K; ++k) as[ta ? k * M + m : m * K + k] = a[m * K + k];
        }
        for (std::int64_t k = 0; k < K; ++k) {
          for (std::int64_t n = 0; n < N; ++n) bs[tb ? n * K + k : k * N + n] = b[k * N + n];
        }
        std::vector<double> c = c0;
        std::vector<float> af(as.begin(), as.end()), bf(bs.begin(), bs.end()),
            cf(c0.begin(), c0.end());
        kernels::cpu::blas_gemm(ta, tb, M, N, K, as.data(), ta ? M : K, bs.data(), tb ? K : N,
                                accumulate, c.data(), N);
        kernels::cpu::blas_gemm(ta, tb, M, N, K, af.data(), ta ? M : K, bf.data(), tb ? K : N,
                                accumulate, cf.data(), N);
        for (std::int64_t m = 0; m < M; ++m) {
          for (std::int64_t n = 0; n < N; ++n) {
            double want = accumulate ? c0[m * N + n] : 0.0;
            for (std::int64_t k = 0; k < K; ++k) want += a[m * K + k] * b[k * N + n];
            EXPECT_NEAR(c[m * N + n], want, 1e-12) << ta << tb << accumulate;
            EXPECT_NEAR(cf[m * N + n], want, 1e-4) << ta << tb << accumulate;
          }
        }
      }
    }
  }
  // K = 0: C = 0, or C left as it was.
  std::vector<double> c = c0;
  kernels::cpu::blas_gemm(false, false, M, N, 0, a.data(), 1, b.data(), N, true, c.data(), N);
  EXPECT_EQ(c, c0);
  kernels::cpu::blas_gemm(false, false, M, N, 0, a.data(), 1, b.data(), N, false, c.data(), N);
  for (const double x : c) EXPECT_EQ(x, 0.0);
}

}  // namespace
}  // namespace qkv::testing
