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
// Intel CPUs with AVX-512 get the Skylake-X kernels only where BLIS reads two FMA units from the
// model in the brand string: a KVM guest's "Intel(R) Xeon(R) Processor" (amx_bf16 avx512_bf16
// avx512f) runs Haswell's. Left so: there the Skylake-X kernels took a lone [448, 128] x [128, 512]
// product from 181 to 249 GFLOP/s on 2 threads, but qkv demo's training step was no faster with
// them (41.6-45.9 ms against 40.2-49.6, alternated runs, the same share of the step in BLIS) and
// its greedy decoding slower (0.50-0.62 s against 0.60-0.65), the 64-row products of a decoding
// step losing Haswell's small-matrix path (2026-11-28).
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

std::string blas_kernels_in_use() {
  bli_init();  // BLIS checks a BLIS_ARCH_TYPE against its registered kernels only once initialized
  const std::string arch = bli_arch_string(bli_arch_query_id());
  if (!kChosen.empty()) return arch + " (set by qkv: BLIS would not know this CPU)";
  return arch +
         (std::getenv("BLIS_ARCH_TYPE") != nullptr ? " (BLIS_ARCH_TYPE)" : " (BLIS's choice)");
}

namespace {

// One BLIS call, its columns of C split among `ways` threads (BLIS's JC loop): C [M, N] =
// op(A) op(B) (+ C), row-major storage. Each thread computes whole columns over the whole of K
// with the same micro-kernel steps as one thread would, so the result does not depend on `ways`:
// bitwise equal to one thread's over 840 small shapes (M, N, K from 1 to 130, every transpose)
// and 400 random ones up to 700, with 2 and 16 ways, where BLIS's default split among 2
// threads changed the last bit in 44 of the small shapes (BLIS 0.9, Intel Xeon with AMX,
// 2026-11-27).
template <class T>
void gemm_columns(trans_t ta, trans_t tb, std::int64_t M, std::int64_t N, std::int64_t K,
                  const T* A, std::int64_t lda, const T* B, std::int64_t ldb, bool accumulate, T* C,
                  std::int64_t ldc, int ways) {
  rntm_t rntm = BLIS_RNTM_INITIALIZER;
  bli_rntm_set_ways(ways, 1, 1, 1, 1, &rntm);
  T alpha = 1, beta = accumulate ? T(1) : T(0);
  // Row-major storage: row stride ld, column stride 1 (as stored, before op()).
  if constexpr (std::is_same_v<T, float>) {
    bli_sgemm_ex(ta, tb, M, N, K, &alpha, const_cast<T*>(A), lda, 1, const_cast<T*>(B), ldb, 1,
                 &beta, C, ldc, 1, nullptr, &rntm);
  } else {
    bli_dgemm_ex(ta, tb, M, N, K, &alpha, const_cast<T*>(A), lda, 1, const_cast<T*>(B), ldb, 1,
                 &beta, C, ldc, 1, nullptr, &rntm);
  }
}

// BLIS's threads come from libgomp, which ThreadSanitizer cannot see synchronize (the tsan
// preset runs LLVM's OpenMP with Archer for qkv's own regions): under TSan each BLIS call stays
// on its calling thread, which changes no result (gemm_columns).
#if defined(__SANITIZE_THREAD__)
constexpr bool kBlisThreads = false;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
constexpr bool kBlisThreads = false;
#else
constexpr bool kBlisThreads = true;
#endif
#else
constexpr bool kBlisThreads = true;
#endif

// Multiply-adds per piece that make a tall product worth cutting into pieces of rows (2^21: a
// [480, 128] x [128, 32] piece, about 20 us on one core of the Xeon below), and the most pieces.
constexpr std::int64_t kPieceMacs = std::int64_t{1} << 21;
constexpr std::int64_t kMaxPieces = 16;

// Multiply-adds below which a product stays on the calling thread: splitting its columns two ways
// took 1.6 us instead of 0.7 at [16, 16] x [16, 16], 2.9 instead of 1.4 at 32^3 and 4.2 instead of
// 2.2 at [64, 16] x [16, 64], broke even around 2^18 (0.80 to 1.15 at three shapes) and won from
// 2^19 (0.67 at [64, 64] x [64, 128]); BLIS 0.9, Intel Xeon with AMX, 2 threads, 2026-11-28.
constexpr std::int64_t kThreadedMacs = std::int64_t{1} << 18;

// blas_gemm for T = float or double, on this call's share of qkv's thread budget
// (qkv/system.hpp). Through cblas_sgemm, BLIS took its thread count from OMP_NUM_THREADS or
// BLIS_NUM_THREADS alone, one thread where neither was set (as under `qkv demo`), whatever
// qkv::set_num_threads said: a training step of qkv demo's translator took 52-54 ms instead of
// 37-44 (2 threads of an Intel Xeon with AMX, 2026-11-27, alternated runs). The results must
// not depend on the thread count, so the threads split C's columns (gemm_columns), or, for a C
// more than twice as tall as wide (a weight's gradient dW^T = x^T dy has few columns to share),
// its rows into pieces whose bounds follow from M, N and K alone (whatever the thread count),
// one single-threaded call each: a [512, 480] x [480, 128] product with its A transposed took
// 503 us with its columns split two ways, 423 in pieces and 371 with BLIS's own split (which
// changes results), same Xeon, 2 threads.
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
  const trans_t ta = transpose_a ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE;
  const trans_t tb = transpose_b ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE;
  if (!kBlisThreads || M * N * K < kThreadedMacs) {
    gemm_columns(ta, tb, M, N, K, A, lda, B, ldb, accumulate, C, ldc, 1);
    return;
  }
  const detail::ThreadShare share(num_threads());
  std::int64_t pieces = std::min({kMaxPieces, M * N * K / kPieceMacs, M / 16});
  if (M <= 2 * N || pieces <= 1) {
    gemm_columns(ta, tb, M, N, K, A, lda, B, ldb, accumulate, C, ldc, share.threads());
    return;
  }
  const std::int64_t rows = ((M + pieces - 1) / pieces + 15) / 16 * 16;
  pieces = (M + rows - 1) / rows;
#pragma omp parallel for schedule(dynamic, 1) num_threads(share.threads())
  for (std::int64_t p = 0; p < pieces; ++p) {
    const std::int64_t start = p * rows, n = std::min(rows, M - start);
    gemm_columns(ta, tb, n, N, K, transpose_a ? A + start : A + start * lda, lda, B, ldb,
                 accumulate, C + start * ldc, ldc, 1);
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
