#pragma once

// Matrix products for the autodiff engine and the linear attention kernel: qkv's own register
// tiles (tiled_gemm.hpp) up to 2^30 multiply-adds, BLIS (Debian's libblis) beyond, with BLIS's
// kernels chosen for this CPU where BLIS itself would not.

#include <cstdint>
#include <string>

namespace qkv::kernels::cpu {

// Row-major C [M, N] = op(A) op(B), plus C when accumulate; op(A) [M, K], op(B) [K, N] (each
// transposed when asked), lda, ldb, ldc the row strides as stored. K = 0 gives 0 (or leaves C).
void blas_gemm(bool transpose_a, bool transpose_b, std::int64_t M, std::int64_t N, std::int64_t K,
               const float* A, std::int64_t lda, const float* B, std::int64_t ldb, bool accumulate,
               float* C, std::int64_t ldc);
void blas_gemm(bool transpose_a, bool transpose_b, std::int64_t M, std::int64_t N, std::int64_t K,
               const double* A, std::int64_t lda, const double* B, std::int64_t ldb,
               bool accumulate, double* C, std::int64_t ldc);

// A linear layer's forward: row-major C [M, N] = bias + A [M, K] W^T, W stored [N, K] with row
// stride ldw, bias [N] added to every row (none when null). The bits of copying the bias into C
// and calling blas_gemm(false, true, ..., accumulate = true).
void blas_linear(std::int64_t M, std::int64_t N, std::int64_t K, const float* A, std::int64_t lda,
                 const float* W, std::int64_t ldw, const float* bias, float* C, std::int64_t ldc);
void blas_linear(std::int64_t M, std::int64_t N, std::int64_t K, const double* A, std::int64_t lda,
                 const double* W, std::int64_t ldw, const double* bias, double* C,
                 std::int64_t ldc);

// The BLIS kernels qkv asked for on this CPU ("skx", "haswell"), or empty where BLIS's own
// choice stands (it knows the CPU, or BLIS_ARCH_TYPE was set already).
const std::string& blas_kernels_chosen();
// Whether a CPU brand string names no model ("Intel(R) Xeon(R) Processor", as KVM and other
// hypervisors report their guests' CPUs): no digit before a frequency's "@". BLIS reads an Intel
// CPU's FMA units from the model, so it cannot tell them here.
bool brand_names_no_model(const std::string& brand);
// The kernels BLIS runs ("skx", "haswell", ...) and who chose them: qkv (BLIS would not know
// this CPU), the BLIS_ARCH_TYPE the user set, or BLIS itself.
std::string blas_kernels_in_use();

}  // namespace qkv::kernels::cpu
