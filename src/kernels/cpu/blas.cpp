#include "kernels/cpu/blas.hpp"

#include <blis.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <type_traits>

#include "core/thread_budget.hpp"
#include "kernels/cpu/cpu_features.hpp"
#include "kernels/cpu/tiled_gemm.hpp"
#include "qkv/system.hpp"

namespace qkv::kernels::cpu {

bool brand_names_no_model(const std::string& brand) {
  const std::string name = brand.substr(0, brand.find('@'));
  return !brand.empty() && name.find_first_of("0123456789") == std::string::npos;
}

namespace {

// Debian's BLIS 0.9 picks its kernels from CPUID once, on its first call. It tells Intel CPUs
// apart by their features and AMD's by family, and knows AMD's only up to family 25 (Zen 3 and
// 4): on family 26 (Zen 5) it runs its portable C kernels ("generic"). Measured on an AMD EPYC
// (avx2 avx512_bf16 avx512f), one thread, 2026-11-25: a 1024^3 sgemm 42.5 GFLOP/s generic, 229
// with its Skylake-X kernels (BLIS_ARCH_TYPE set by hand); 4096 x 65 x 64, a linear attention
// product, 32 and 139. So on an AMD family past 25, and on an Intel CPU whose brand names no
// model (below), before BLIS's first call (a static initializer, while the process is still
// starting), BLIS_ARCH_TYPE asks for the Skylake-X kernels where AVX-512 F, CD, DQ, BW and VL
// are usable, else Haswell's where AVX2 and FMA are; a BLIS_ARCH_TYPE the user set is left alone.
// Intel CPUs with AVX-512 get the Skylake-X kernels only where BLIS reads two FMA units from the
// model in the brand string; a brand that names no model (a KVM guest's "Intel(R) Xeon(R)
// Processor") gets Haswell's, half the vector width. Measured on such a guest (amx_bf16
// avx512_bf16 avx512f, 2 threads, 2026-11-28), Haswell's against Skylake-X's: a 1024^3 sgemm 170
// against 249 GFLOP/s; a linear layer's forward and backward at [480, 128] -> 512, 1438-1450 us
// against 1032-1059 (with the pieces of gemm_of below); qkv demo's training step 40.0, 42.7, 40.0
// ms against 35.2, 42.6, 34.3 (alternated runs). Its greedy decoding, batches of 64 rows, was
// slower: 0.49-0.55 s against 0.54-0.64, a [64, 128] x [128, 128] product taking 24 us on
// Skylake-X's kernels in two pieces against 16 on Haswell's small-matrix path.
std::string choose_kernels() {
  const CpuFeatures& f = cpu_features();
  const bool unknown = (f.amd && f.family > 25) || (f.intel && brand_names_no_model(f.brand));
  if (!unknown || std::getenv("BLIS_ARCH_TYPE") != nullptr) return "";
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

// Whether BLIS's kernels compute each element of C the same way whatever block of C a call
// covers, so that C may be cut anywhere among threads: its Skylake-X kernels (no small-matrix
// path) gave bitwise the whole product's C from rows and from columns cut at arbitrary bounds,
// 300 random shapes up to 600 each in f32 and f64, every transpose, and from BLIS's own row and
// column splits (400 shapes); Haswell's differed in 247 of the 300 (its small-matrix kernels
// treat edges by the block's own size). BLIS 0.9, Intel Xeon with AMX, 2026-11-28.
bool split_invariant() {
  static const bool invariant = [] {
    bli_init();
    return bli_arch_query_id() == BLIS_ARCH_SKX;
  }();
  return invariant;
}

// Products of up to this many multiply-adds run tiled_gemm (kernels/cpu/tiled_gemm.hpp), larger
// ones BLIS, which packs A as well as B. On 2 threads of an Intel Xeon (AVX-512, AMX; 2026-11-28,
// median us of a linear layer's forward x W^T + b, [M, K] x [N, K]^T, tiled against BLIS's
// Skylake-X kernels in the pieces below): M 64, K 128, N 384 35-42 against 50-55; M 64, K 512,
// N 128 36-49 against 64-68; M 448, K 128, N 384 165-181 against 161-171; M 448, K 512, N 128
// 181-204 against 219-231; 1024^3 6569 against 6594; [2048, 2048] x [512, 2048]^T 12967 against
// 12299. qkv demo's training step 19.7-20.0 ms against 21.2-23.4 and its greedy decoding 22.2-23.3
// thousand tokens/s against 18.8-18.9 (`qkv bench --training`, alternated runs).
constexpr std::int64_t kTiledMaxMacs = std::int64_t{1} << 30;

// C of at most this many rows is cut into columns, taller C into rows, one piece per thread,
// where the kernels are split-invariant (Skylake-X's, 2 threads, 2026-11-28): a decoding step's
// [64, 128] x [128, 384] took 53 us in two column pieces, 65 in two row pieces and 67 with
// BLIS's column split; a training step's [448, 128] x [128, 384] 212 in columns, 197 in rows,
// 199 with BLIS's split; [128, 448] x [448, 512] 308 in columns, 411 in rows.
constexpr std::int64_t kColumnPiecesRows = 128;

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
// changes results), same Xeon, 2 threads. With bias [N] (and accumulate false), C's rows start
// from it: in the tiles' accumulators, or copied into C before an accumulating BLIS product.
template <class T>
void gemm_of(bool transpose_a, bool transpose_b, std::int64_t M, std::int64_t N, std::int64_t K,
             const T* A, std::int64_t lda, const T* B, std::int64_t ldb, bool accumulate, T* C,
             std::int64_t ldc, const T* bias = nullptr) {
  if (M == 0 || N == 0) return;
  if (M * N * K <= kTiledMaxMacs) {  // K = 0 included
    const detail::ThreadShare share(M * N * K < kThreadedMacs ? 1 : num_threads());
    tiled_gemm(transpose_a, transpose_b, M, N, K, A, lda, B, ldb, accumulate, C, ldc,
               share.threads(), bias);
    return;
  }
  if (bias != nullptr && !accumulate) {
    for (std::int64_t m = 0; m < M; ++m) std::copy_n(bias, N, C + m * ldc);
    accumulate = true;
  }
  const trans_t ta = transpose_a ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE;
  const trans_t tb = transpose_b ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE;
  if (!kBlisThreads || M * N * K < kThreadedMacs) {
    gemm_columns(ta, tb, M, N, K, A, lda, B, ldb, accumulate, C, ldc, 1);
    return;
  }
  const detail::ThreadShare share(num_threads());
  if (split_invariant()) {
    const int threads = share.threads();
    const bool by_columns = M <= kColumnPiecesRows;
    const std::int64_t extent = by_columns ? N : M;
    const std::int64_t step = ((extent + threads - 1) / threads + 15) / 16 * 16;
    const std::int64_t parts = (extent + step - 1) / step;
#pragma omp parallel for schedule(static) num_threads(threads)
    for (std::int64_t p = 0; p < parts; ++p) {
      const std::int64_t start = p * step, n = std::min(step, extent - start);
      if (by_columns) {
        gemm_columns(ta, tb, M, n, K, A, lda, transpose_b ? B + start * ldb : B + start, ldb,
                     accumulate, C + start, ldc, 1);
      } else {
        gemm_columns(ta, tb, n, N, K, transpose_a ? A + start : A + start * lda, lda, B, ldb,
                     accumulate, C + start * ldc, ldc, 1);
      }
    }
    return;
  }
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

void blas_linear(std::int64_t M, std::int64_t N, std::int64_t K, const float* A, std::int64_t lda,
                 const float* W, std::int64_t ldw, const float* bias, float* C, std::int64_t ldc) {
  gemm_of(false, true, M, N, K, A, lda, W, ldw, false, C, ldc, bias);
}

void blas_linear(std::int64_t M, std::int64_t N, std::int64_t K, const double* A, std::int64_t lda,
                 const double* W, std::int64_t ldw, const double* bias, double* C,
                 std::int64_t ldc) {
  gemm_of(false, true, M, N, K, A, lda, W, ldw, false, C, ldc, bias);
}

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
