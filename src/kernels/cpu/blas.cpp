#include "kernels/cpu/blas.hpp"

#include <blis.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <type_traits>

#include "core/thread_budget.hpp"
#include "kernels/cpu/cpu_features.hpp"
#include "qkv/system.hpp"

namespace qkv::kernels::cpu {
namespace {

// Debian's BLIS 0.9 picks its kernels from CPUID once, on its first call. It tells Intel CPUs
// apart by their features and AMD's by family, and knows AMD's only up to family 25 (Zen 3 and
// 4): on family 26 (Zen 5) it runs its portable C kernels ("generic"). Measured on an AMD EPYC
// (avx2 avx512_bf16 avx512f), one thread, 2026-11-25: a 1024^3 sgemm 42.5 GFLOP/s generic, 229
// with its Skylake-X kernels (BLIS_ARCH_TYPE set by hand); 4096 x 65 x 64, a linear attention
// product, 32 and 139. So on an AMD family past 25, before BLIS's first call (a static
// initializer, while the process is still starting), BLIS_ARCH_TYPE asks for the Skylake-X
// kernels where AVX-512 F, CD, DQ, BW and VL are usable, else Haswell's where AVX2 and FMA are;
// a BLIS_ARCH_TYPE the user set is left alone.
std::string choose_kernels() {
  const CpuFeatures& f = cpu_features();
  if (!f.amd || f.family <= 25 || std::getenv("BLIS_ARCH_TYPE") != nullptr) return "";
  const bool skx = f.avx512f && f.avx512cd && f.avx512dq && f.avx512bw && f.avx512vl;
  if (!skx && !(f.avx2 && f.fma)) return "";
  const arch_t arch = skx ? BLIS_ARCH_SKX : BLIS_ARCH_HASWELL;
  setenv("BLIS_ARCH_TYPE", std::to_string(static_cast<int>(arch)).c_str(), 0);
  return skx ? "skx" : "haswell";
}

const std::string kChosen = choose_kernels();

}  // namespace

const std::string& blas_kernels_chosen() { return kChosen; }

namespace {

// blas_gemm for T = float (bli_sgemm_ex) or double (bli_dgemm_ex), on this call's share of
// qkv's thread budget (qkv/system.hpp). Through cblas_sgemm, BLIS took its thread count from
// OMP_NUM_THREADS or BLIS_NUM_THREADS alone, one thread where neither was set (as under `qkv
// demo`), whatever qkv::set_num_threads said: a training step of qkv demo's translator took 52-54
// ms instead of 37-44 (2 threads of an Intel Xeon with AMX, 2026-11-27, alternated runs).
template <class T>
void gemm_of(bool transpose_a, bool transpose_b, std::int64_t M, std::int64_t N, std::int64_t K,
             const T* A, std::int64_t lda, const T* B, std::int64_t ldb, bool accumulate, T* C,
             std::int64_t ldc) {
  if (M == 0 || N == 0) return;
  if (K == 0) {
    if (!accumulate) {
      for (std::int64_t m = 0; m < M; ++m) std::fill_n(C + m * ldc, N, T(0));
    }
    return;
  }
  const detail::ThreadShare share(num_threads());
  rntm_t rntm = BLIS_RNTM_INITIALIZER;
  bli_rntm_set_num_threads(share.threads(), &rntm);
  T alpha = 1, beta = accumulate ? T(1) : T(0);
  const trans_t ta = transpose_a ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE;
  const trans_t tb = transpose_b ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE;
  // Row-major storage: row stride ld, column stride 1 (as stored, before op()).
  if constexpr (std::is_same_v<T, float>) {
    bli_sgemm_ex(ta, tb, M, N, K, &alpha, const_cast<T*>(A), lda, 1, const_cast<T*>(B), ldb, 1,
                 &beta, C, ldc, 1, nullptr, &rntm);
  } else {
    bli_dgemm_ex(ta, tb, M, N, K, &alpha, const_cast<T*>(A), lda, 1, const_cast<T*>(B), ldb, 1,
                 &beta, C, ldc, 1, nullptr, &rntm);
  }
}

}  // namespace

void blas_gemm(bool transpose_a, bool transpose_b, std::int64_t M, std::int64_t N, std::int64_t K,
               const float* A, std::int64_t lda, const float* B, std::int64_t ldb, bool accumulate,
               float* C, std::int64_t ldc) {
  gemm_of(transpose_a, transpose_b, M, N, K, A, lda, B, ldb, accumulate, C, ldc);
}

void blas_gemm(bool transpose_a, bool transpose_b, std::int64_t M, std::int64_t N, std::int64_t K,
               const double* A, std::int64_t lda, const double* B, std::int64_t ldb,
               bool accumulate, double* C, std::int64_t ldc) {
  gemm_of(transpose_a, transpose_b, M, N, K, A, lda, B, ldb, accumulate, C, ldc);
}

}  // namespace qkv::kernels::cpu
